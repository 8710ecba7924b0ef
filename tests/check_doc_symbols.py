#!/usr/bin/env python3
"""Every C++ or Python name a doc puts in code exists in the repository.

    python3 tests/check_doc_symbols.py [ROOT]

Reads the pages check_doc_names.py reads and, outside fenced blocks, every
inline `code` span that is a name: qualified (`Cache::prepare()`), called
(`validate()`) or spelled as the project spells types and constants
(`StepPlan`, `kStreamRows`). Each word of it must occur in a tracked source
file. A member of one of the project's classes (`SchedulerOptions::kv_storage`)
must occur in the header that declares the class or in one of its bases'
(EngineSettings, for SchedulerOptions): a renamed member cannot hide behind
the same word elsewhere. EXTERNAL lists the few names docs cite from other
projects.

Exit status 1 naming each unknown name with its page and line, else 0.
Plain Python 3 and git.
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_report  # noqa: E402
from check_doc_names import INLINE, pages, prose_lines, tracked  # noqa: E402

SOURCES = (".hpp", ".cpp", ".cu", ".cuh", ".h", ".py", ".sh", ".cmake", ".txt", ".in", ".jinja",
           ".toml")
NAME = re.compile(r"^(?:[A-Za-z_]\w*::)*~?[A-Za-z_]\w*(?:\(\))?$")
PROJECT_STYLE = re.compile(r"^(k[A-Z]|[A-Z][a-z0-9]+[A-Z])")
MEMBER = re.compile(r"^(?:\w+::)*([A-Z]\w*)::(~?\w+)(?:\(\))?$")
CLASS = re.compile(r"\b(?:class|struct)\s+([A-Z]\w*)\s*(?:final\s*)?(?::\s*(?:public\s+)?([\w:]+))?\s*\{")
EXTERNAL = {
    "ByteFallback",       # a tokenizers (Hugging Face) decoder
    "PyBaseObject_Type",  # CPython
    "gloo",               # gloo's API, which the TP transport wraps
    "IStore",
    "Context",
    "setTimeout",
    "has_v2_support",
}


def is_name(token):
    return bool(NAME.match(token)) and ("::" in token or token.endswith("()")
                                        or bool(PROJECT_STYLE.match(token)))


def source_index(root, files):
    """(every word in a tracked source, {class: (header text, base)})."""
    words, classes = set(), {}
    for name in files:
        if not name.endswith(SOURCES):
            continue
        text = (root / name).read_text(errors="replace")
        words.update(re.findall(r"[A-Za-z_]\w*", text))
        if name.endswith((".hpp", ".h", ".cuh")):
            for m in CLASS.finditer(text):
                base = (m.group(2) or "").split("::")[-1]
                classes.setdefault(m.group(1), []).append((text, base))
    return words, classes


def member_known(cls, member, classes, seen=()):
    for text, base in classes.get(cls, []):
        if re.search(r"\b" + re.escape(member) + r"\b", text):
            return True
        if base and base not in seen and member_known(base, member, classes, seen + (cls,)):
            return True
    return False


def problems(root):
    files, _, _ = tracked(root)
    words, classes = source_index(root, files)
    found = []
    for page in pages(root):
        for number, line in prose_lines(page):
            for token in (t.strip() for t in INLINE.findall(line)):
                if not is_name(token):
                    continue
                where = f"{page.relative_to(root)}:{number}: `{token}`"
                unknown = [w for w in re.findall(r"[A-Za-z_]\w*", token)
                           if w not in words and w not in EXTERNAL]
                if unknown:
                    found.append(f"{where}: {', '.join(unknown)} occurs in no source file")
                    continue
                m = MEMBER.match(token)
                if m and m.group(1) in classes and \
                        not member_known(m.group(1), m.group(2).lstrip("~"), classes):
                    found.append(f"{where}: {m.group(1)} (and its bases) declares no "
                                 f"{m.group(2)}")
    return found


if __name__ == "__main__":
    sys.exit(check_report.main("check_doc_symbols", problems))
