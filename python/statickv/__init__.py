"""statickv: preallocated, CUDA-graph-safe KV caches, from Python.

The classes are the C++ ones (bound with pybind11, statickv._C): CacheConfig,
StaticCache, HybridCache, StepPlan, ShapeBuckets. Importing the package also
registers the operator library, torch.ops.statickv.cache_write, which a
compiled forward uses to write into the caches' buffers (docs/python.md).
statickv.hf holds the transformers cache and generation loop.
"""

import os

import torch  # noqa: F401  (loads libtorch before the extension)

from statickv._C import (  # noqa: F401
    Cache,
    CacheConfig,
    HybridCache,
    KvStorage,
    LayerType,
    ShapeBuckets,
    StaticCache,
    StepPlan,
    __version__,
    built_with_cuda,
    all_sliding,
    alternating,
    estimate_memory,
    estimate_memory_bytes,
    sliding_then_full,
)

cache_write = torch.ops.statickv.cache_write

# The C++ package installed with this one (headers, libstatickv.a, the CMake
# package config): a C++ project finds it with
#   cmake -DCMAKE_PREFIX_PATH="<this>;<torch.utils.cmake_prefix_path>"
# and find_package(statickv) (docs/getting-started.md). built_with_cuda says
# whether its library carries the CUDA parts.
cmake_prefix_path = os.path.dirname(os.path.abspath(__file__))
