"""statickv for Hugging Face transformers: StaticKVCache (a transformers
Cache over one statickv cache) and generate (statickv's own bucketed
generation loop). See docs/python.md."""

from statickv.hf.cache import StaticKVCache, estimate_memory, layer_types_of  # noqa: F401
from statickv.hf.generate import generate  # noqa: F401
