"""Every command README.md, BENCHMARKS.md, the pages under docs/ and
benchmarks/gpu/README.md show names a program that exists and flags that
program takes.

usage: check_doc_commands.py ROOT BUILD PYTHON

A command is a line of a fenced code block, or an inline `code` span with
arguments, that
starts (after VAR=value settings) with a program the project builds or
ships: build/<dir>/<binary> (or a bare statickv_bench_*, statickv-demo,
statickv-serve, as the GPU rows write them), bash <script>.sh,
[.venv/bin/]python[3] <script>.py. Lines joined at a trailing backslash;
a `#` comment and a `[...]` around optional flags are read as written.

- binaries: the file exists under BUILD and each --flag appears in its
  --help; a binary the build defines but did not build (a test binary
  before ctest builds it, a CUDA-only one) is reported and skipped;
- Python scripts: the file exists under ROOT and each --flag appears in
  `PYTHON script --help`;
- shell scripts: the file exists and each --flag appears in its text
  (scripts/test.sh hands its arguments to ctest: ctest --help).
Commands that need a GPU are checked the same way: flags only, never run.
"""

import re
import shlex
import subprocess
import sys
from pathlib import Path

FENCE = re.compile(r"^\s*```")
INLINE = re.compile(r"`([^`]+)`")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
SETTING = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
BARE = re.compile(r"^(statickv_bench_\w+|statickv-demo|statickv-serve)$")


def doc_files(root):
    return [root / "README.md", root / "BENCHMARKS.md", *sorted((root / "docs").rglob("*.md")),
            root / "benchmarks" / "gpu" / "README.md"]


def candidate_lines(text):
    """Code-block lines (backslash continuations joined), and the inline
    spans with arguments (a lone `build/smollm2` or program name is a path
    or a name in prose, not a command)."""
    out, block, pending = [], False, ""
    for line in text.splitlines():
        if FENCE.match(line):
            block, pending = not block, ""
            continue
        if block:
            pending += line.rstrip("\\").strip() + " "
            if not line.rstrip().endswith("\\"):
                out.append(pending.strip())
                pending = ""
        else:
            out += [span for span in INLINE.findall(line) if len(span.split()) > 1]
    return out


def segments(line):
    """The commands of a line: split at &&, ||, ;, | and a trailing comment."""
    line = re.sub(r"\s#.*$", "", line.strip().removeprefix("$ "))
    return [s.strip() for s in re.split(r"&&|\|\||;|\|", line) if s.strip()]


def program_of(command):
    """(kind, program path as written, the rest) or None if not ours."""
    try:
        words = shlex.split(command.replace("[", " ").replace("]", " "))
    except ValueError:
        return None
    while words and SETTING.match(words[0]):
        words = words[1:]
    if not words:
        return None
    head, rest = words[0], words[1:]
    if (head.startswith("build/") and not head.endswith("/")) or BARE.match(head):
        return "binary", head, rest
    if head == "bash" and rest and rest[0].endswith(".sh"):
        return "shell", rest[0], rest[1:]
    if re.match(r"^(\.venv/bin/)?python3?$", head) and rest and rest[0].endswith(".py"):
        return "python", rest[0], rest[1:]
    return None


class Programs:
    """Each program's --help (or text), read once."""

    def __init__(self, root, build, python):
        self.root, self.build, self.python = root, build, python
        self.texts = {}

    def binary(self, written):
        if BARE.match(written):
            hits = [p for d in ("apps", "benchmarks") for p in [self.build / d / written]
                    if p.is_file()]
            return hits[0] if hits else None
        path = self.build / written.removeprefix("build/")
        return path if path.is_file() else None

    def defined(self, written):
        """A binary the build defines but this configuration did not build."""
        ninja = self.build / "build.ninja"
        name = Path(written).name
        return ninja.exists() and re.search(rf"\b{re.escape(name)}\b", ninja.read_text()) is not None

    def text(self, kind, written):
        key = (kind, written)
        if key not in self.texts:
            self.texts[key] = self._read(kind, written)
        return self.texts[key]

    def _read(self, kind, written):
        if kind == "binary":
            path = self.binary(written)
            return None if path is None else run([str(path), "--help"])
        path = self.root / written
        if not path.is_file():
            return None
        if kind == "python":
            return run([self.python, str(path), "--help"], cwd=self.root)
        if written == "scripts/test.sh":
            return path.read_text() + run(["ctest", "--help"])
        return path.read_text()


def run(argv, cwd=None):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd)
    return done.stdout + done.stderr


def check(root, build, python):
    programs, failures, skipped, checked = Programs(root, build, python), [], set(), 0
    for doc in doc_files(root):
        for line in candidate_lines(doc.read_text()):
            for command in segments(line):
                found = program_of(command)
                if found is None:
                    continue
                kind, written, rest = found
                where = f"{doc.relative_to(root)}: {command[:100]}"
                text = programs.text(kind, written)
                if text is None:
                    if kind == "binary" and programs.defined(written):
                        skipped.add(written)
                    else:
                        failures.append(f"{where}: {written} does not exist")
                    continue
                checked += 1
                # the program's own flags: words that are flags, not a value that holds
                # another program's (serve_load.py --variant eager=statickv:--eager)
                for flag in [m.group(1) for m in map(FLAG.match, rest) if m]:
                    if flag not in text:
                        failures.append(f"{where}: {written} has no {flag}")
    return checked, failures, skipped


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__.split("\n\n")[1])
    root, build, python = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    checked, failures, skipped = check(root, build, python)
    for name in sorted(skipped):
        print(f"skipped (not built in this configuration): {name}")
    for failure in failures:
        print(f"FAIL {failure}")
    print(f"{checked} documented commands checked, {len(failures)} failures")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
