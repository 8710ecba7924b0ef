#!/usr/bin/env python3
"""The doc and test-mirror checks catch the drift they exist for.

    python3 tests/check_checkers.py

Builds a small repository in a temporary folder (one header, its API page
section, its test, a page naming its members), checks that
check_api_doc.py, check_test_mirror.py and check_doc_symbols.py pass it,
then plants one drift at a time and checks that the right checker names it.
Exit status 1 on the first check that misses or misfires. Plain Python 3 and
git.
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_api_doc  # noqa: E402
import check_doc_symbols  # noqa: E402
import check_test_mirror  # noqa: E402

HEADER = """#pragma once
#include <cstdint>
namespace statickv {
/// Doubles x.
int64_t twice(int64_t x);
class Ring {
 public:
  explicit Ring(int64_t slots);
  Ring(const Ring&) = delete;
  /// Slots in use.
  int64_t used() const { return used_; }
  void push(const int64_t* values = nullptr, int64_t n = 0);
 private:
  int64_t hidden();
  int64_t used_ = 0;
};
namespace detail {
int64_t internal(int64_t x);
}  // namespace detail
}  // namespace statickv
"""
API = """# API reference
## The library
### ring.hpp
Rings.
```cpp
int64_t twice(int64_t x);
class Ring {
 public:
  explicit Ring(int64_t slots);
  int64_t used() const;
  void push(const int64_t* values = nullptr, int64_t n = 0);
};
```
```cpp
statickv::Ring ring(4);                 // an example: calls, not declarations
std::printf("%lld\\n", static_cast<long long>(statickv::twice(ring.used())));
```
"""
TEST = """// Ring.
#include <statickv/ring.hpp>
TEST_CASE("a ring") {
  statickv::Ring ring(2);
  ring.push();
  CHECK(ring.used() == statickv::twice(0));
}
"""
PAGE = "# Rings\n\n`Ring::used()` counts; `twice()` doubles.\n"


def build(root):
    (root / "include/statickv").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "tests/core").mkdir(parents=True)
    (root / "include/statickv/ring.hpp").write_text(HEADER)
    (root / "docs/api.md").write_text(API)
    (root / "tests/core/test_ring.cpp").write_text(TEST)
    (root / "docs/rings.md").write_text(PAGE)
    (root / "README.md").write_text("# r\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)


def edit(root, name, old, new):
    path = root / name
    text = path.read_text()
    assert old in text, (name, old)
    path.write_text(text.replace(old, new))
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)


CASES = [  # (checker, file, old, new, words the finding must hold)
    (check_api_doc.problems, "docs/api.md", "int64_t twice(int64_t x);", "int64_t twice(int x);",
     ["twice(int x)", "omits"]),
    (check_api_doc.problems, "docs/api.md", "  int64_t used() const;\n", "", ["omits", "used()const"]),
    (check_api_doc.problems, "include/statickv/ring.hpp", "void push(const int64_t* values = nullptr",
     "void push(const int64_t* values = NULL", ["push("]),
    (check_test_mirror.problems, "tests/core/test_ring.cpp", "ring.push();", "// ring.push();",
     ["never names push"]),
    (check_test_mirror.problems, "tests/core/test_ring.cpp", "CHECK(ring.used()",
     "CHECK(\"used()\" && ring.size()", ["used"]),
    (check_doc_symbols.problems, "docs/rings.md", "doubles.", "doubles; `kNoSuchThing` is a typo.",
     ["kNoSuchThing"]),
    (check_doc_symbols.problems, "docs/rings.md", "`Ring::used()`", "`Ring::capacity()`",
     ["capacity"]),
]


def main():
    failures = []
    for checker, name, old, new, words in [(None, None, None, None, None)] + CASES:
        tmp = Path(tempfile.mkdtemp(prefix="statickv-checkers-"))
        try:
            build(tmp)
            if checker is None:  # the clean tree passes every checker
                for c in (check_api_doc.problems, check_test_mirror.problems,
                          check_doc_symbols.problems):
                    if c(tmp):
                        failures.append(f"{c.__module__} flags the clean tree: {c(tmp)}")
                continue
            edit(tmp, name, old, new)
            found = checker(tmp)
            joined = "\n".join(found)
            if not found or not all(w in joined for w in words):
                failures.append(f"{checker.__module__} on {name} ({old!r} -> {new!r}) found "
                                f"{found}, expected {words}")
        finally:
            shutil.rmtree(tmp)
    for f in failures:
        print(f)
    print(f"check_checkers: {len(CASES) + 1} cases, {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
