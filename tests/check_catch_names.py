#!/usr/bin/env python3
"""Every Catch2 test case name can be registered and selected by ctest.

    python3 tests/check_catch_names.py [ROOT]

catch_discover_tests (tests/CMakeLists.txt) writes one ctest test per test
case from the executable's list of names, in a CMake script, and ctest runs
each by its name as a Catch test spec. A name with an unbalanced `[` or `]`
or with a `;` or a backslash breaks that script's lists: every later case
of the executable silently goes unregistered (statickv_tests once lost 108
of its 115 cases that way). This check reads every TEST_CASE,
TEMPLATE_TEST_CASE and SCENARIO name under tests/ and fails naming each
such name; it also fails on a name used twice in one folder (ctest names
must be unique). Exit status 1 on a failure, else 0. Plain Python 3.
"""

import re
import sys
from collections import defaultdict
from pathlib import Path

CASE = re.compile(r'\b(?:TEST_CASE|TEMPLATE_TEST_CASE|SCENARIO)\s*\(\s*"((?:[^"\\]|\\.)*)"', re.S)


def problem(name):
    """Why `name` cannot be registered, or None."""
    depth = 0
    for c in name:
        depth += {"[": 1, "]": -1}.get(c, 0)
        if depth < 0:
            return "a ']' before its '['"
    if depth:
        return "an unbalanced '['"
    if ";" in name or "\\" in name:
        return "a ';' or a backslash"
    return None


def main():
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    failures, seen = [], defaultdict(dict)
    for path in sorted((root / "tests").rglob("*.cpp")):
        text = path.read_text(errors="replace")
        for match in CASE.finditer(text):
            name = match.group(1)
            where = f"{path.relative_to(root)}:{text.count(chr(10), 0, match.start()) + 1}"
            why = problem(name)
            if why:
                failures.append(f"{where}: test case name with {why}: {name!r}")
            earlier = seen[path.parent].get(name)
            if earlier:
                failures.append(f"{where}: test case name also used at {earlier}: {name!r}")
            seen[path.parent][name] = where
    for f in failures:
        print(f)
    count = sum(len(v) for v in seen.values())
    print(f"{count} test case names checked, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
