#!/usr/bin/env python3
"""Tests mirror headers: each public header has a test of its name that
calls every public function it declares.

    python3 tests/check_test_mirror.py [ROOT]

The public headers are check_api_doc.py's (include/statickv/*.hpp, each
reference library's and the AOTInductor package's include/ folder; detail/
aside). For `statickv/<lib>/<name>.hpp` the test is the one file named
`test_<name>.cpp` under tests/, and each function cpp_api.py finds public in
the header (constructors by their class's name; operators, destructors
and deleted or defaulted members aside) must occur in it as a word.
statickv.hpp (the umbrella) and version.hpp (macros and a constant) declare
nothing to call. Feature tests (test_soak.cpp, test_bad_input.cpp) stay
beside the mirrors, named after what they test.

Exit status 1 naming each header without its test and each function its
test never names, else 0. Plain Python 3.
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_report  # noqa: E402
import cpp_api  # noqa: E402
from check_api_doc import EXEMPT, public_headers  # noqa: E402


def callable_names(header_text):
    names = []
    for d in cpp_api.declarations(header_text):
        if d.deleted or d.name.startswith(("operator", "~")) or d.name in names:
            continue
        names.append(d.name)
    return names


def problems(root):
    tests = {}
    for path in sorted((root / "tests").rglob("test_*.cpp")):
        tests.setdefault(path.name, []).append(path)
    found = []
    for include, path in sorted(public_headers(root).items()):
        if path.name in EXEMPT:
            continue
        mirror = tests.get(f"test_{path.stem}.cpp", [])
        if len(mirror) != 1:
            found.append(f"{include}: expected one tests/**/test_{path.stem}.cpp but found "
                         f"{len(mirror)}")
            continue
        text = cpp_api.blank_cxx(mirror[0].read_text())  # comments and strings blanked
        missing = [n for n in callable_names(path.read_text())
                   if not re.search(r"(?<![\w~])" + re.escape(n) + r"\b", text)]
        if missing:
            found.append(f"{mirror[0].relative_to(root)}: never names {', '.join(missing)} "
                         f"(public in {include})")
    return found


if __name__ == "__main__":
    sys.exit(check_report.main("check_test_mirror", problems))
