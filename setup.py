"""Builds the statickv Python package (python/) through the project's CMake
build: one build for the wheel and the C++ package it carries.

The extension module statickv._C (the pybind11 bindings, python/csrc/bindings.cpp,
and the operator library, python/csrc/ops.cpp) links the compiled statickv
library; the same CMake build installs that library, its headers and its CMake
package config into the Python package, where `statickv.cmake_prefix_path`
points a C++ project's find_package(statickv) (docs/getting-started.md). The
CUDA parts are in when the build found nvcc and a CUDA torch
(`statickv.built_with_cuda`). Install with
`python -m pip install --no-build-isolation .` so it builds against the
environment's pinned torch; MAX_JOBS caps the build's jobs.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
TORCH = torch.__version__.split("+")[0]


def version():
    text = (ROOT / "include/statickv/version.hpp").read_text()
    return re.search(r'kVersion = "([^"]+)"', text).group(1)


def cmake_configure_args(package_dir, tree):
    """The library and the extension only, installed into the package."""
    args = [
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
        f"-DPython3_EXECUTABLE={sys.executable}",
        f"-DCMAKE_INSTALL_PREFIX={package_dir}",
        "-DCMAKE_INSTALL_LIBDIR=lib",
        "-DSTATICKV_BUILD_PYTHON=ON",
        "-DSTATICKV_INSTALL=ON",
    ]
    for part in ("TESTS", "BENCHMARKS", "EXAMPLES", "REFERENCE", "AOTI"):
        args.append(f"-DSTATICKV_BUILD_{part}=OFF")
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    # The compiler only on the first configure, as an absolute path: CMake
    # caches it resolved, and a different spelling on a later configure makes
    # it drop the cache and re-run without the options above.
    if os.environ.get("CXX") and not (tree / "CMakeCache.txt").exists():
        args.append(f"-DCMAKE_CXX_COMPILER={shutil.which(os.environ['CXX']) or os.environ['CXX']}")
    return args


class CMakeBuild(build_ext):
    """Configures, builds and installs the CMake project for statickv._C."""

    def build_extension(self, ext):
        module = Path(self.get_ext_fullpath(ext.name)).resolve()
        package_dir = module.parent
        tree = Path(self.build_temp).resolve() / "cmake"
        tree.mkdir(parents=True, exist_ok=True)
        jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(tree)]
                       + cmake_configure_args(package_dir, tree), check=True)
        subprocess.run(["cmake", "--build", str(tree), "-j", jobs, "--target", "statickv_python"],
                       check=True)
        subprocess.run(["cmake", "--install", str(tree)], check=True)
        built = sorted((tree / "python").glob("_C*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one statickv._C module in {tree / 'python'} "
                               f"but found {[p.name for p in built]}")
        shutil.copyfile(built[0], module)


setup(
    version=version(),
    packages=["statickv", "statickv.hf"],
    package_dir={"": "python"},
    ext_modules=[Extension("statickv._C", sources=[])],
    # The extension and the C++ package are compiled against this torch's C++
    # ABI, so they need this torch (any local build tag) and no other.
    install_requires=[f"torch=={TORCH}"],
    cmdclass={"build_ext": CMakeBuild},
    # build/ is the CMake build tree of scripts/setup.sh; one tree per torch
    # version here, so objects of one are never linked against another.
    options={"build": {"build_base": f"build-py/torch{TORCH}"}},
)
