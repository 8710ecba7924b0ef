#!/usr/bin/env python3
"""Finds C++ and Python functions longer than a limit (default 80 lines).

    python3 scripts/check_function_length.py [--max N] [PATH ...]
    python3 scripts/check_function_length.py --top N
    python3 scripts/check_function_length.py --per-dir

Without --top or --per-dir it is a check: it reads every C++ (*.hpp, *.h,
*.cpp, *.cu, *.cuh) and Python (*.py) source of the repository that git
lists (tracked files, and new files git does not ignore, so build trees and
virtual environments never count; a file under a third_party/, vendor/ or
generated/ folder is skipped) -- include/, src/, reference/, apps/, flags/,
python/, aoti/, benchmarks/, tests/, tools/, examples/, scripts/ and the
root's setup.py -- or the PATHs given (files or folders), lists every
function longer than --max lines as `file:line name length`, and exits 1 if
there is one, else 0.

A C++ body's length counts from the line of its opening brace to the line of
its closing brace. Lambdas, local classes and blocks inside a function count
towards that function; namespace, class, struct, union and enum braces are
not functions, but member functions defined inside a class are. Comments,
string and character literals (raw strings too) and preprocessor lines are
blanked before braces are counted, so braces inside them never count. The
parser is a heuristic, not a compiler: a function body is a brace at
namespace or class level that follows a parameter list `)` (plus qualifiers,
a trailing return type or a constructor's initializer list).

A Python function's length counts from its `def` line to the last line of
its body (the `ast` module's lineno to end_lineno: decorators and trailing
blank or comment lines are not counted). Functions and classes defined
inside a function count towards it, like a C++ lambda; methods of a
module-level class are functions of their own (`Class.method`).

--top N prints the N longest functions, C++ and Python together; --per-dir
prints the lines of code (non-blank, non-comment) of the tracked source
files per top-level directory of the repository. Both are reports: they
exit 0.

Needs only Python 3.8+ (for end_lineno); without git it walks the folders
named above instead.
"""

import argparse
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CXX_SUFFIXES = (".hpp", ".h", ".cpp", ".cu", ".cuh")
PY_SUFFIXES = (".py",)
SOURCE_SUFFIXES = CXX_SUFFIXES + PY_SUFFIXES
# Where the sources are when git cannot list them.
DEFAULT_DIRS = ("include", "src", "reference", "apps", "flags", "python", "aoti", "benchmarks",
                "tests", "tools", "examples", "scripts")
# Folders whose files are not this project's to split: never read.
SKIPPED_DIRS = ("third_party", "vendor", "generated")


def blank_cxx(text, code_too=True):
    """Returns text with comments, literals and preprocessor lines replaced by
    spaces (newlines kept, so line numbers stay). A string literal keeps its
    two quotes (its characters become spaces), so `extern "C"` still reads
    as an extern block. With code_too false only comments are blanked."""
    out = []
    i, n = 0, len(text)
    line_start = True  # only whitespace since the last newline
    while i < n:
        c = text[i]
        if c == "\n":
            out.append(c)
            i += 1
            line_start = True
            continue
        if line_start and c == "#" and code_too:
            # A preprocessor directive, with its backslash continuations.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        raw = re.match(r'(?:u8|u|U|L)?R"([^()\\\s"]{0,16})\(', text[i:i + 24])
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            close = ")" + raw.group(1) + '"'
            end = text.find(close, i + raw.end())
            end = n if end < 0 else end + len(close)
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:end]) if code_too else text[i:end])
            i = end
            continue
        if c == '"' or (c == "'" and not is_digit_separator(text, i)):
            j = i + 1  # to the closing quote, or the end of the line if none
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j, n)
            closed = j < n and text[j] == c
            body = text[i + 1:j]
            out.append(c + (re.sub(r"[^\n]", " ", body) if code_too else body) + (c if closed else ""))
            i = j + 1 if closed else j
            continue
        out.append(c)
        i += 1
    return "".join(out)


def is_digit_separator(text, i):
    """True when the quote at i separates digits (1'000'000, 0xFF'FF)."""
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_'."):
        j -= 1
    return j < i and text[j].isdigit()


# Trailing parts a function head may end with after its parameter list.
_QUALIFIERS = re.compile(
    r"(?:\s*(?:(?<!\w)(?:const|volatile|override|final|mutable|try)\b|&&|&"
    r"|(?<!\w)noexcept\s*\(\s*[^()]*\s*\)|(?<!\w)noexcept\b|(?<!\w)throw\s*\(\s*\)))*\s*$")


def _matching_open(head, close):
    """Index of the '(' that matches the ')' at index close, or -1."""
    depth = 0
    for k in range(close, -1, -1):
        if head[k] == ")":
            depth += 1
        elif head[k] == "(":
            depth -= 1
            if depth == 0:
                return k
    return -1


def _top_level(head, pattern):
    """Positions in head where pattern starts outside any () or []."""
    depth = 0
    for k, ch in enumerate(head):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and head.startswith(pattern, k):
            yield k


def _cut_initializer_list(head):
    """A constructor head without its initializer list (`) : a_(x), b_{y}`)."""
    for k in _top_level(head, ":"):
        if head[k - 1:k] != ":" and head[k + 1:k + 2] != ":":
            before = head[:k].rstrip()
            if re.search(r"\)" + _QUALIFIERS.pattern, before):
                return before
    return head


def function_name(head):
    """The function a head declares (`Foo::bar`, `operator()`), or None when
    the head does not end the way a function definition's does."""
    cut = _cut_initializer_list(head)
    if cut != head and not re.search(r"[)}]\s*$", head):
        return None  # a member's brace initializer inside the list: `a_{`
    head = cut
    for k in _top_level(head, "->"):  # trailing return type
        if re.search(r"\)" + _QUALIFIERS.pattern, head[:k]):
            head = head[:k]
            break
    head = re.sub(r"\s*=\s*(?:default|delete)\s*$", "", head)
    m = _QUALIFIERS.search(head)
    head = head[:m.start()] if m else head
    if not head.endswith(")"):
        return None
    open_paren = _matching_open(head, len(head) - 1)
    if open_paren < 0:
        return None
    before = head[:open_paren].rstrip()
    if before.endswith("]"):
        return "lambda"
    m = re.search(r"((?:[A-Za-z_]\w*\s*(?:<[^;{}()]*>)?\s*::\s*)*"
                  r"(?:operator\s*(?:\(\s*\)|[^\w\s(]+|\w[\w\s]*)|~?[A-Za-z_]\w*))"
                  r"\s*(?:<[^;{}()]*>)?\s*$", before)
    if not m:
        return None
    name = re.sub(r"\s*::\s*", "::", " ".join(m.group(1).split()))
    name = re.sub(r"operator (?=[^\w])", "operator", name)
    if name in ("if", "for", "while", "switch", "catch", "return", "sizeof", "decltype"):
        return None
    return name


def find_functions(text):
    """Yields (line, name, length) for every function body in C++ text."""
    code = blank_cxx(text)
    # Stack of braces: (kind, line, name); kind is namespace, class, function,
    # expression (an initializer: its head goes on after it closes) or block.
    stack = []
    head = []  # text since the last ; { } at namespace or class level
    line = 1
    for ch in code:
        if ch == "\n":
            line += 1
        in_function = any(kind == "function" for kind, _, _ in stack)
        in_expression = bool(stack) and stack[-1][0] == "expression"
        if in_function or in_expression:
            if ch == "{":
                stack.append(("block" if in_function else "expression", line, None))
            elif ch == "}" and stack:
                kind, start, name = stack.pop()
                if kind == "function":
                    yield start, name, line - start + 1
                    head = []
                elif kind == "expression" and not any(k == "expression" for k, _, _ in stack):
                    head.append("{}")
            continue
        if ch == "{":
            text_head = " ".join("".join(head).split())
            name = function_name(text_head)
            if name is not None:
                stack.append(("function", line, name))
            elif re.search(r'\bnamespace\b|\bextern\s*"\s*"\s*$', text_head):
                stack.append(("namespace", line, None))
                head = []
            elif re.search(r"\b(?:class|struct|union|enum)\b", text_head) and not re.search(
                    r"=\s*$|\breturn\s*$|[(,]\s*$", text_head):
                stack.append(("class", line, None))
                head = []
            else:
                stack.append(("expression", line, None))
        elif ch == "}":
            if stack:
                stack.pop()
            head = []
        elif ch == ";":
            head = []
        else:
            head.append(ch)
            if ch == ":" and re.search(r"\b(?:public|private|protected)\s*:$", "".join(head)):
                head = []  # an access specifier ends nothing but starts a new head
    if stack:
        print(f"warning: {len(stack)} unclosed brace(s); results may be off", file=sys.stderr)


def skipped(path):
    """True for a build tree, a virtual environment, a hidden folder or a
    third-party or generated one."""
    return any(part.startswith((".", "build")) or part in SKIPPED_DIRS or part == "__pycache__"
               for part in path.parts[:-1])


def source_files(paths):
    for base in paths:
        base = Path(base)
        if base.is_file():
            yield base
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames
                                 if not d.startswith((".", "build")) and d not in SKIPPED_DIRS
                                 and d != "__pycache__")
            for f in sorted(filenames):
                if f.endswith(SOURCE_SUFFIXES):
                    yield Path(dirpath) / f


def repository_sources():
    """Every C++ and Python source git lists (tracked, or new and not
    ignored), outside skipped folders; None without git."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True)
        out = out.stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return None
    rels = sorted({Path(p) for p in out.split("\0") if p.endswith(SOURCE_SUFFIXES)})
    return [ROOT / p for p in rels
            if not skipped(p) and (ROOT / p).is_file() and not (ROOT / p).is_symlink()]


def python_functions(text, path="<text>"):
    """Yields (line, name, length) for every Python function that is not
    inside another function: module-level ones and methods of classes that
    are not inside a function. Length: the def line to the body's last."""
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as e:
        print(f"warning: {path}: not parsed ({e.msg}, line {e.lineno})", file=sys.stderr)
        return

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield child.lineno, prefix + child.name, child.end_lineno - child.lineno + 1
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, prefix + child.name + ".")
            else:  # if/try/with blocks at module or class level
                yield from visit(child, prefix)

    yield from visit(tree, "")


def display(path):
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def all_functions(paths):
    found = []
    for path in source_files(paths):
        text = path.read_text(encoding="utf-8", errors="replace")
        functions = (python_functions(text, display(path)) if path.name.endswith(PY_SUFFIXES)
                     else find_functions(text))
        for line, name, length in functions:
            found.append((display(path), line, name, length))
    return found


def tracked_files():
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True,
                             check=True).stdout.decode()
        return [ROOT / p for p in out.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        return [Path(d) / f for d, _, fs in os.walk(ROOT) for f in fs if "/." not in d]


def code_lines(path):
    """(lines, code lines) of a source file; None when it is not source."""
    name = path.name
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if name.endswith(CXX_SUFFIXES):
        return lines, sum(1 for ln in blank_cxx(text, code_too=False).splitlines() if ln.strip())
    if name.endswith((".py", ".sh", ".cmake", ".cmake.in")) or name == "CMakeLists.txt":
        return lines, sum(1 for ln in text.splitlines()
                          if ln.strip() and not ln.strip().startswith("#"))
    return None


def per_dir():
    rows = {}
    for path in tracked_files():
        if not path.is_file() or path.is_symlink():
            continue
        counted = code_lines(path)
        if counted is None:
            continue
        rel = path.relative_to(ROOT)
        top = rel.parts[0] + "/" if len(rel.parts) > 1 else "(root)"
        files, lines, code = rows.get(top, (0, 0, 0))
        rows[top] = (files + 1, lines + counted[0], code + counted[1])
    print(f"{'directory':<14} {'files':>5} {'lines':>7} {'code':>7}")
    for top in sorted(rows, key=lambda t: -rows[t][2]):
        files, lines, code = rows[top]
        print(f"{top:<14} {files:>5} {lines:>7} {code:>7}")
    total = [sum(r[i] for r in rows.values()) for i in range(3)]
    print(f"{'total':<14} {total[0]:>5} {total[1]:>7} {total[2]:>7}")
    print("(tracked C++, Python, shell and CMake files; code = non-blank, non-comment lines)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", help="files or folders (default: every C++ and Python "
                        "source git lists, outside third-party and generated folders)")
    parser.add_argument("--max", type=int, default=80, help="longest allowed body (default 80)")
    parser.add_argument("--top", type=int, metavar="N", help="print the N longest functions (a report: exit 0)")
    parser.add_argument("--per-dir", action="store_true",
                        help="print lines of code per top-level directory (a report: exit 0)")
    args = parser.parse_args(argv)
    paths = args.paths or repository_sources()
    if paths is None:  # no git: walk the folders that hold sources
        paths = [ROOT / d for d in DEFAULT_DIRS if (ROOT / d).exists()]

    if args.top is not None or args.per_dir:
        if args.top is not None:
            longest = sorted(all_functions(paths), key=lambda f: (-f[3], f[0], f[1]))
            for path, line, name, length in longest[:args.top]:
                print(f"{length:>5}  {path}:{line} {name}")
        if args.per_dir:
            if args.top is not None:
                print()
            per_dir()
        return 0

    offenders = [f for f in all_functions(paths) if f[3] > args.max]
    for path, line, name, length in sorted(offenders):
        print(f"{path}:{line} {name} {length}")
    if offenders:
        print(f"{len(offenders)} function(s) longer than {args.max} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
