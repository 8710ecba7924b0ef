#!/usr/bin/env python3
"""Every file a doc names exists, and every Note a file cites is written.

    python3 tests/check_doc_names.py [ROOT]

Reads README.md, BENCHMARKS.md, every page under docs/ and the README.md
of each library under reference/ and each folder under benchmarks/, and
checks every repository path they name: in
an inline `code` span or as a Markdown link's target. A name with a folder
(`reference/model/src/checkpoint/families.cpp`, `tests/apps/`) must exist
under ROOT, or beside the page for a relative link; a bare file name
(`families.cpp`) must be the name of some file the repository tracks.
Build and run outputs (build/..., results/...), absolute paths, URLs,
placeholders (<...>, $VAR, *), paths outside the repository's own folders
(a library's headers, a user's build-torchV/) and fenced blocks (commands
and output samples, which check_doc_commands.py reads) are skipped.

Every `Note [name]` and `Invariant [name]` cited in a tracked source or
page must be written somewhere: a Markdown heading under docs/ holding it
(docs/design.md's, mostly) or a comment that opens it in place
(`// Note [name]: ...`).

Exit status 1 naming each missing path or Note with its file and line,
else 0. Plain Python 3 and git.
"""

import re
import subprocess
import sys
from pathlib import Path

EXTENSIONS = (".cpp", ".hpp", ".h", ".cu", ".cuh", ".py", ".sh", ".md", ".cmake", ".txt",
              ".json", ".toml", ".in", ".jinja")
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
PATHLIKE = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]*$")
NOT_OURS = ("build/", "results/", "/", "~", ".venv/", "http:", "https:", "$")
FENCE = re.compile(r"^\s*```")


def pages(root):
    found = [root / "README.md", root / "BENCHMARKS.md"]
    found += sorted((root / "docs").rglob("*.md"))
    found += sorted((root / "reference").glob("*/README.md"))
    found += sorted((root / "benchmarks").rglob("README.md"))
    return [p for p in found if p.exists()]


def prose_lines(page):
    """(number, line) of each line of `page` outside fenced blocks (commands
    and output samples: check_doc_commands.py reads them)."""
    fenced = False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            yield number, line


def tracked(root):
    out = subprocess.run(["git", "-C", str(root), "ls-files"], capture_output=True, text=True,
                         check=True).stdout.split()
    return set(out), {Path(f).name for f in out}, {f.split("/")[0] for f in out}


def candidate(token):
    """The path `token` names, or None when it is not a repository path."""
    token = token.strip().rstrip(".,:;")
    if ":" in token:  # file:line
        token = token.split(":")[0]
    if not token or token.startswith(NOT_OURS) or not PATHLIKE.match(token):
        return None
    if token.endswith("/"):
        return token if "/" in token[:-1] or len(token) > 1 else None
    return token if token.endswith(EXTENSIONS) else None


SOURCE = (".cpp", ".hpp", ".cu", ".cuh", ".py", ".sh")


def ours(root, page, path, tops):
    """Whether `path` names a repository file: a bare source file name, or a
    path whose first folder is one of the repository's (or, written as an
    include, statickv/...), or a link relative to the page."""
    if "/" not in path.rstrip("/"):
        return path.endswith(SOURCE)
    first = path.split("/")[0]
    if first in ("statickv", "..", "."):
        return True
    return first in tops or (page.parent / first).exists()


def exists(root, page, path, files, names):
    if "/" not in path.rstrip("/"):
        return path.rstrip("/") in names
    if path.startswith("statickv/"):  # an include path
        return any(f.endswith("/" + path.rstrip("/")) or ("/" + path) in f for f in files)
    return (root / path).exists() or (page.parent / path).exists()


NOTE = re.compile(r"(?:Note|Invariant) \[[^\]\[]+\]")
TEXT = (".cpp", ".hpp", ".h", ".cu", ".cuh", ".py", ".sh", ".md", ".txt", ".cmake")


def note_problems(root, files):
    """Cited Notes with no heading under docs/ and no comment that opens them."""
    cited, written = {}, set()
    this = Path(__file__).resolve()
    for name in sorted(f for f in files if f.endswith(TEXT)):
        if (root / name).resolve() == this:
            continue  # its own docstring shows the forms
        for number, line in enumerate((root / name).read_text(errors="replace").splitlines(), 1):
            for note in NOTE.findall(line):
                if note == "Note [...]":
                    continue
                cited.setdefault(note, f"{name}:{number}")
                heading = name.startswith("docs/") and line.lstrip().startswith("#")
                if heading or re.match(r"\s*(//|#|\*|///)\s*" + re.escape(note) + ":", line):
                    written.add(note)
    return [f"{where}: {note} is cited but written nowhere (a docs/ heading or a "
            f"'// {note}:' comment)" for note, where in sorted(cited.items()) if note not in written]


def main():
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    files, names, tops = tracked(root)
    missing = []
    for page in pages(root):
        for number, line in prose_lines(page):
            tokens = INLINE.findall(line) + LINK.findall(line)
            for token in tokens:
                path = candidate(token)
                if path and ours(root, page, path, tops) and not exists(root, page, path, files, names):
                    missing.append(f"{page.relative_to(root)}:{number}: {path}")
    for entry in missing:
        print(f"{entry}: no such file in the repository")
    notes = note_problems(root, files)
    for entry in notes:
        print(entry)
    print(f"{len(pages(root))} pages read; {len(missing)} missing paths; "
          f"{len(notes)} Notes cited but not written")
    return 1 if missing or notes else 0


if __name__ == "__main__":
    sys.exit(main())
