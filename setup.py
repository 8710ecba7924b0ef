"""Builds the statickv Python package (python/) with torch.utils.cpp_extension.

One extension module, statickv._C: the pybind11 bindings (python/csrc/bindings.cpp)
and the operator library (python/csrc/ops.cpp, TORCH_LIBRARY(statickv)),
compiled against the headers in include/ and the installed torch. Install with
`python -m pip install --no-build-isolation .` so it builds against the
environment's pinned torch.
"""

import re
from pathlib import Path

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = Path(__file__).resolve().parent
TORCH = torch.__version__.split("+")[0]


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
            # No -std: torch's builder picks its own standard (C++17 up to
            # 2.13, C++20 from 2.14, whose headers require it).
            extra_compile_args=["-O2"],
            # Cache's bodies compiled here, not linked from the CMake library.
            define_macros=[("STATICKV_HEADER_ONLY", None)],
        )
    ],
    # The extension is compiled against this torch's C++ ABI, so it needs
    # this torch (any local build tag) and no other.
    install_requires=[f"torch=={TORCH}"],
    cmdclass={"build_ext": BuildExtension},
    # build/ is the CMake build tree (scripts/setup.sh); one build tree per
    # torch version, so objects of one are never linked against another.
    options={"build": {"build_base": f"build-py/torch{TORCH}"}},
)
