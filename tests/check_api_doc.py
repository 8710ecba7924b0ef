#!/usr/bin/env python3
"""docs/api.md's signatures are the headers' own, and it lists them all.

    python3 tests/check_api_doc.py [ROOT]

docs/api.md has one section per public header (`### cache.hpp`; the
sampling library's section names its three headers as `<statickv/...>`).
For each section, every function declared in its ```cpp blocks must be
declared, with the same signature, by the section's header (cpp_api.py
says what "the same" means: text up to the parameter list's end and a
trailing const, specifiers and whitespace aside), and every public function
the header declares must appear in the section. Example blocks pass through:
a call is not a declaration. Every public header must have a section.

Exit status 1 naming each mismatch with its line, else 0. Plain Python 3.
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_report  # noqa: E402
import cpp_api  # noqa: E402

SECTION = re.compile(r"^### (.+)$")
INCLUDE = re.compile(r"<(statickv/[\w/]+\.hpp)>")
EXEMPT = {"statickv.hpp", "version.hpp"}  # the umbrella and macros: nothing to call


def public_headers(root):
    """{"statickv/cache.hpp": path} for every public header."""
    found = {}
    roots = [root / "include"] + sorted(root.glob("reference/*/include")) + [root / "aoti/include"]
    for base in roots:
        for path in sorted(base.rglob("*.hpp")):
            rel = path.relative_to(base).as_posix()
            if "/detail/" not in rel and not rel.startswith("statickv/json/"):
                found[rel] = path
    return found


def sections(api_text):
    """[(heading, first line, [lines])] for every ### section."""
    out, current = [], None
    for number, text in enumerate(api_text.splitlines(), 1):
        m = SECTION.match(text)
        if m or text.startswith("## "):
            current = (m.group(1).strip(), number, []) if m else None
            if current:
                out.append(current)
        elif current:
            current[2].append((number, text))
    return out


def cpp_blocks(lines):
    """[(first line, text)] of each ```cpp block."""
    blocks, inside, start, body = [], False, 0, []
    for number, text in lines:
        if text.strip().startswith("```"):
            if inside:
                blocks.append((start, "\n".join(body)))
            inside = not inside and text.strip() == "```cpp"
            start, body = number + 1, []
        elif inside:
            body.append(text)
    return blocks


def section_headers(heading, lines, headers):
    named = {h for _, t in lines[:6] for h in INCLUDE.findall(t) if h in headers}
    if named:
        return sorted(named)
    return sorted(h for h in headers if h.endswith("/" + heading))


def problems(root):
    headers = public_headers(root)
    api = (root / "docs/api.md").read_text()
    found, covered = [], set()
    for heading, number, lines in sections(api):
        names = section_headers(heading, lines, headers)
        if not names:
            continue
        covered.update(names)
        declared = {}
        for h in names:
            for d in cpp_api.declarations(headers[h].read_text()):
                declared.setdefault(d.key, (h, d))
        documented, names_documented = set(), set()
        for start, block in cpp_blocks(lines):
            for d in cpp_api.declarations(block, public_only=False):
                documented.add(d.key)
                names_documented.add(d.name)
                if d.key not in declared:
                    found.append(f"docs/api.md:{start + d.line - 1}: `{d.key}` is not declared "
                                    f"by {', '.join(names)}")
        for key, (h, d) in declared.items():
            if d.override and d.name in names_documented:
                continue  # an override is documented with the function it overrides
            if key not in documented and not d.deleted:
                found.append(f"docs/api.md:{number}: section {heading} omits {h}:{d.line} "
                                f"`{key}`")
    for h in sorted(set(headers) - covered):
        if Path(h).name not in EXEMPT:
            found.append(f"docs/api.md: no section documents {h}")
    return found


if __name__ == "__main__":
    sys.exit(check_report.main("check_api_doc", problems))
