#!/usr/bin/env python3
"""No code but the families table tests a model_type string.

    python3 tests/model/check_family_strings.py [ROOT]

Every difference between model families lives in one row of the table in
reference/model/src/checkpoint/families.cpp (families.hpp): a family added
there is read the same way everywhere, and a comparison elsewhere is a
place a new family would silently fall through to another's behaviour.
This check reads the table's model types and fails, naming file and line,
on any C++ source under include/, src/, reference/, apps/, aoti/ or python/
(the table aside) that compares a string with one of them or compares a
model_type with anything. Exit status 1 on a failure, else 0. Plain Python 3.
"""

import re
import sys
from pathlib import Path

TABLE = Path("reference/model/src/checkpoint/families.cpp")
ROW = re.compile(r'\{"([a-z0-9_]+)",\s*"(\w+Config)"')
FOLDERS = ("include", "src", "reference", "apps", "aoti", "python")
SOURCES = (".cpp", ".hpp", ".h", ".cu", ".cuh")


def comparisons(types):
    """Patterns of a comparison with a family's type or with a model_type."""
    names = "|".join(re.escape(t) for t in types)
    literal = rf'"(?:{names})"'
    return [
        re.compile(rf"[!=]=\s*{literal}"),
        re.compile(rf"{literal}\s*[!=]="),
        re.compile(r"model_type\s*[!=]="),
        re.compile(r"[!=]=\s*[\w.>-]*model_type\b"),
    ]


def main():
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    types = ROW.findall((root / TABLE).read_text())
    if len(types) < 2:
        print(f"{TABLE}: expected the families table's rows but found {len(types)}")
        return 1
    patterns = comparisons([t for t, _ in types])
    failures = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SOURCES or path == root / TABLE:
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if any(p.search(line) for p in patterns):
                    failures.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    for failure in failures:
        print(f"{failure}\n  compares a model_type outside the families table ({TABLE})")
    print(f"{len(types)} families in the table; {len(failures)} comparisons elsewhere")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
