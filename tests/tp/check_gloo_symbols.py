"""The soundness guard of the Gloo transport (docs/tensor_parallel.md,
"The transport decision").

The wheel's ProcessGroupGloo.hpp is compiled against Debian's 2022 Gloo
headers, whose classes differ in layout from the Gloo the wheel was built
with (gloo::rendezvous::Store gained a base class and five virtuals). That is
sound only while our objects never emit code that depends on a Gloo class's
layout: no Gloo function, vtable or typeinfo defined in them, no GlooStore
(c10d's wrapper deriving from gloo::rendezvous::Store), and Debian's
libgloo.so never loaded next to the wheel's copy inside libtorch_cpu.

    python3 check_gloo_symbols.py FILE...   # objects or executables
Exits non-zero naming each offending symbol or library.
"""

import re
import subprocess
import sys

# A symbol whose own name (not a template argument) is in namespace gloo, or
# the vtable/typeinfo of a gloo class, or anything of c10d's GlooStore.
OFFENDING = re.compile(r"^((vtable|typeinfo|typeinfo name|VTT|construction vtable) for )?"
                       r"(gloo::|c10d::ProcessGroupGloo::GlooStore)")


# nm's types for local (internal-linkage) data: the headers' namespace-scope
# constants (gloo::kNoTimeout, the slot-prefix strings), which an unoptimized
# build emits as objects of their own. They hold values, not code that reads
# a Gloo class's layout, and no other object can bind to them.
LOCAL_DATA = set("rbd")


def defined_symbols(path):
    out = subprocess.run(["nm", "-C", "--defined-only", path], check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] not in LOCAL_DATA:
            yield parts[2]


def linked_libraries(path):
    result = subprocess.run(["ldd", path], capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else ""


def main(paths):
    problems = []
    for path in paths:
        problems += [f"{path}: defines {s}" for s in defined_symbols(path) if OFFENDING.match(s)]
        if "libgloo" in linked_libraries(path):
            problems.append(f"{path}: loads Debian's libgloo next to the wheel's Gloo")
    for problem in problems:
        print(problem)
    if not paths:
        print("check_gloo_symbols.py: expected at least one file")
        return 2
    print(f"{len(paths)} file(s), {len(problems)} Gloo layout dependence(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
