"""The public functions a C++ header declares, read without a compiler.

A small scanner for the project's own headers (clang-formatted, one
declaration per statement): it blanks comments, literals and preprocessor
lines with the function-length check's reader (blank_cxx in
scripts/check_function_length.py), walks the braces, skips function
bodies, enums and everything in a `detail` (`utf8_detail`) or unnamed
namespace or a private/protected section, and returns each remaining
statement that declares a function. Used by check_api_doc.py (docs/api.md
against the headers) and check_test_mirror.py
(each public header's test calls its functions).

A declaration's *key* is its text up to the end of its parameter list plus
a trailing `const`, with specifiers (`inline`, `static`, `virtual`,
`explicit`, `constexpr`, `[[nodiscard]]`, `[[noreturn]]`) dropped and
whitespace normalized: the part a reader of the API needs, and what two
copies of one declaration share whether or not one carries a body, an
initializer list, `override` or `= delete`.
"""

import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from check_function_length import blank_cxx  # noqa: E402

SPECIFIERS = re.compile(r"\b(inline|static|virtual|explicit|constexpr|extern)\s+|\[\[\w+\]\]\s*")
IDENT = re.compile(r"(~?[A-Za-z_]\w*|operator\s*(\(\)|\[\]|[^\w\s(]+))\s*$")


@dataclass
class Decl:
    key: str      # normalized signature (see the module's docstring)
    name: str     # the function's name; a constructor's is its class's
    scope: str    # enclosing classes, "" at namespace scope ("Cache", "CacheConfig::Bytes")
    deleted: bool   # `= delete`, `= default` or a destructor: nothing to document or call
    line: int
    override: bool = False


def normalize(s):
    s = SPECIFIERS.sub("", " ".join(s.split()))
    s = re.sub(r"\s*([(),&*<>=:\[\]{}])\s*", r"\1", s)
    return s.strip()


def param_list_end(stmt):
    """(open, close) of the first parameter list: the first `(` outside
    template brackets, or None."""
    depth_angle, i = 0, 0
    op = re.search(r"\boperator\s*(\(\)|\[\]|[^\w\s(]+)", stmt)
    while i < len(stmt):
        c = stmt[i]
        if op and i == op.start():
            i = op.end()
            continue
        if c == "<":
            depth_angle += 1
        elif c == ">" and depth_angle:
            depth_angle -= 1
        elif c in "={;" and not depth_angle:
            return None
        elif c == "(" and not depth_angle:
            depth, j = 0, i
            while j < len(stmt):
                depth += {"(": 1, ")": -1}.get(stmt[j], 0)
                if depth == 0:
                    return i, j
                j += 1
            return None
        i += 1
    return None


BUILTIN = {"void", "bool", "char", "short", "int", "long", "float", "double", "unsigned", "auto"}


def _split_top(params):
    """`params` split at its top-level commas."""
    parts, depth, cur = [], 0, []
    for c in params:
        if c in "(<{[":
            depth += 1
        elif c in ")>}]":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return parts


def _is_parameter(p):
    """`p` reads as a parameter declaration (a type, maybe a name and a
    default), not as an argument of a call."""
    p = p.split("=")[0].strip()
    if not p or p == "...":
        return True
    if re.search(r'["\'.]|->|^\d|^-', p) or "(" in p and ")" in p and not re.search(r"\(\s*\*", p):
        return False
    words = re.findall(r"[\w:<>,*&\[\]]+", p)
    if len(words) >= 2:
        return True
    word = words[0].rstrip("*&") if words else ""
    return (word in BUILTIN or word.endswith("_t") or "::" in word or "<" in word
            or word[:1].isupper())


def declaration(stmt, scope, line):
    """The Decl `stmt` (a statement's text before its body or `;`) makes, or None."""
    text = " ".join(stmt.split())
    if not text or re.match(r"(using|typedef|friend|static_assert|return|template\s*<[^>]*>\s*"
                            r"(class|struct|using))\b", text):
        return None
    span = param_list_end(text)
    if span is None:
        return None
    head = text[:span[0]]
    m = IDENT.search(head)
    if not m:
        return None
    before = head[:m.start()].strip()
    name = m.group(1).replace(" ", "")
    cls = scope.split("::")[-1] if scope else ""
    ctor = name in (cls, "~" + cls)
    if not before or before.endswith((".", "->", "::")) and not ctor:
        if not ctor:
            return None  # a call, not a declaration
    if "." in before or "->" in before or before.endswith(("=", "return")):
        return None
    tail = text[span[1] + 1:]
    const = " const" if re.match(r"\s*const\b", tail) else ""
    key = normalize(text[:span[1] + 1] + const)
    if not all(_is_parameter(p) for p in _split_top(text[span[0] + 1:span[1]])):
        return None  # `Type var(args)`: a variable, not a function
    deleted = bool(re.search(r"=\s*(delete|default)\s*$", tail)) or name.startswith("~")
    return Decl(key, name, scope, deleted, line, bool(re.search(r"\boverride\b", tail)))


def _scope_kind(stmt):
    s = " ".join(stmt.split())
    m = re.search(r"\bnamespace\s*([\w:]*)\s*$", s)
    if m:
        return "namespace", m.group(1)
    if param_list_end(s) is None:
        m = re.match(r"(template\s*<.*>\s*)?(class|struct|union)\s+(?:\[\[\w+\]\]\s*)?(\w+)", s)
        if m:
            return ("class" if m.group(2) == "class" else "struct"), m.group(3)
        if re.match(r"enum\b", s):
            return "enum", ""
    return "body", ""


class _Scanner:
    """One pass over a stripped header: statements, scopes, access."""

    def __init__(self, src, public_only):
        self.src, self.public_only = src, public_only
        self.decls = []
        self.stack = [("namespace", "", True)]  # (kind, name, visible)
        self.access = [True]
        self.stmt, self.start_line, self.line, self.i = [], 1, 1, 0

    def text(self):
        return "".join(self.stmt)

    def visible(self):
        return all(e[2] for e in self.stack) and self.access[-1]

    def emit(self):
        scope = "::".join(e[1] for e in self.stack if e[0] in ("class", "struct"))
        d = declaration(self.text(), scope, self.start_line)
        if d and (self.visible() or not self.public_only):
            self.decls.append(d)

    def skip_block(self, depth):
        """Past the brace that closes the one at depth `depth`."""
        while self.i < len(self.src):
            c = self.src[self.i]
            depth += {"{": 1, "}": -1}.get(c, 0)
            self.line += c == "\n"
            self.i += 1
            if depth == 0:
                return

    def open_brace(self):
        kind, name = _scope_kind(self.text())
        if kind == "body":  # a function's body or an initializer
            self.emit()
            self.skip_block(0)
            # `= {...};` initializers end at their `;`
            if not re.search(r"=\s*$", self.text()):
                self.stmt = []
            return
        self.i += 1
        self.stmt = []
        if kind == "enum":
            self.skip_block(1)
            return
        public_ns = not (name == "" or "detail" in name)
        self.stack.append((kind, name, public_ns if kind == "namespace" else self.visible()))
        self.access.append(kind != "class")

    def access_label(self):
        return (self.stack[-1][0] in ("class", "struct")
                and re.fullmatch(r"\s*(public|private|protected)\s*", self.text())
                and self.src[self.i + 1:self.i + 2] != ":")

    def step(self, c, paren):
        if paren > 0 and c in "{}":
            self.stmt.append(c)  # a braced argument or default: `= {}`, `{1, 2}`
        elif c == "{":
            self.open_brace()
            return
        elif c == "}":
            if len(self.stack) > 1:  # a snippet may close what it never opened
                self.stack.pop()
                self.access.pop()
            self.stmt = []
        elif c == ";":
            self.emit()
            self.stmt = []
        elif c == ":" and self.access_label():
            self.access[-1] = self.text().strip() == "public"
            self.stmt = []
        else:
            self.stmt.append(c)
        self.i += 1

    def run(self):
        paren = 0  # open parentheses in the statement: braces inside are arguments
        while self.i < len(self.src):
            c = self.src[self.i]
            self.line += c == "\n"
            if not self.text().strip():
                self.start_line, paren = self.line, 0
            if c in "()":
                paren += 1 if c == "(" else -1
            self.step(c, paren)
        return self.decls


def declarations(text, public_only=True):
    """Every function declared at namespace or class scope in `text`, in
    order: with public_only, those a user of the header can call."""
    return _Scanner(blank_cxx(text), public_only).run()
