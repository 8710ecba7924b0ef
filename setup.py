"""Builds the statickv Python package (python/) with torch.utils.cpp_extension.

One extension module, statickv._C: the pybind11 bindings (python/csrc/bindings.cpp)
and the operator library (python/csrc/ops.cpp, TORCH_LIBRARY(statickv)),
compiled against the headers in include/ and the installed torch. Install with
`python -m pip install --no-build-isolation .` so it builds against the
environment's pinned torch.
"""

import re
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = Path(__file__).resolve().parent


def version():
    text = (ROOT / "include/statickv/version.hpp").read_text()
    return re.search(r'kVersion = "([^"]+)"', text).group(1)


setup(
    version=version(),
    packages=["statickv", "statickv.hf"],
    package_dir={"": "python"},
    ext_modules=[
        CppExtension(
            "statickv._C",
            # src/offload.cpp: host offload's CPU factories, which the caches'
            # constructors call (a CUDA device needs the CMake build's CUDA parts).
            sources=["python/csrc/ops.cpp", "python/csrc/bindings.cpp", "src/offload.cpp"],
            include_dirs=[str(ROOT / "include"), str(ROOT / "python/csrc")],
            extra_compile_args=["-O2", "-std=c++17"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    # build/ is the CMake build tree (scripts/setup.sh)
    options={"build": {"build_base": "build-py"}},
)
