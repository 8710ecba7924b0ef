"""statickv: preallocated, CUDA-graph-safe KV caches, from Python.

The classes are the C++ ones (bound with pybind11, statickv._C): CacheConfig,
StaticCache, HybridCache, StepPlan, ShapeBuckets. Importing the package also
registers the operator library, torch.ops.statickv.cache_write, which a
compiled forward uses to write into the caches' buffers (docs/python.md).
statickv.hf holds the transformers cache and generation loop.
"""

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
    all_sliding,
    alternating,
    estimate_memory,
    estimate_memory_bytes,
    sliding_then_full,
)

cache_write = torch.ops.statickv.cache_write
