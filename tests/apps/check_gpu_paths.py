#!/usr/bin/env python3
"""The prepared GPU run (benchmarks/gpu/run_gpu.sh, aoti.sh) names binaries
by their place in the build tree and scripts by their place in the source
tree; a binary or script that moved would only be found missing on the GPU
machine, whose time is scarce. This checks every path those scripts name
against where the build put each target, and every script they run
against the source tree.

usage: check_gpu_paths.py SOURCE_DIR BUILD_DIR NAME=PATH...
       (PATH empty: the target is not built in this configuration)
"""

import re
import sys
from pathlib import Path

SCRIPTS = ["benchmarks/gpu/run_gpu.sh", "benchmarks/gpu/aoti.sh"]


def main():
    source, build = Path(sys.argv[1]), Path(sys.argv[2])
    targets = dict(arg.split("=", 1) for arg in sys.argv[3:])
    failures, checked, skipped = [], 0, []
    for script in SCRIPTS:
        text = (source / script).read_text()
        for rel in sorted(set(re.findall(r"\$B/([A-Za-z0-9_.-]+)", text))):
            text += f" $BUILD/benchmarks/{rel}"
        for rel in sorted(set(re.findall(r"\$BUILD/([A-Za-z0-9_./-]+)", text))):
            if rel == "benchmarks":
                continue
            name = Path(rel).name
            name = name[3:-3] if name.startswith("lib") and name.endswith(".so") else name
            if name not in targets:
                failures.append(f"{script}: $BUILD/{rel}: no target {name} is known to this "
                                "check (add it to tests/apps/CMakeLists.txt)")
            elif not targets[name]:
                skipped.append(name)
            elif Path(targets[name]).resolve() != (build / rel).resolve():
                failures.append(f"{script}: $BUILD/{rel}: expected {name} there but the build "
                                f"puts it at {targets[name]}")
            else:
                checked += 1
        for rel in sorted(set(re.findall(r"(?<![\w/$])((?:benchmarks|tests|examples|tools)/"
                                         r"[A-Za-z0-9_./-]+\.(?:py|sh))", text))):
            if not (source / rel).is_file():
                failures.append(f"{script}: {rel}: expected a file in the source tree")
            else:
                checked += 1
    for failure in failures:
        print("FAIL", failure)
    print(f"{checked} paths found where the GPU scripts expect them; not built here: "
          f"{', '.join(sorted(set(skipped))) or 'none'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
