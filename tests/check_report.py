"""The one way the repository's check_*.py scripts run and report.

    sys.exit(check_report.main("check_name", problems))

`problems(root)` returns a list of lines, one per finding, naming the file
and line; ROOT is argv[1] or the repository holding this file. Prints each
line, then "<name>: N problem(s)"; the exit status is 1 when there is any.
"""

import sys
from pathlib import Path


def main(name, problems):
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    found = problems(root)
    for line in found:
        print(line)
    print(f"{name}: {len(found)} problem(s)")
    return 1 if found else 0
