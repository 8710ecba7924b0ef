"""StaticKVCache: a transformers (v5) Cache over one statickv C++ cache.

One instance allocates its buffers once, for max_batch_size rows and
max_cache_len positions, and serves any batch up to max_batch_size call after
call on those buffers (Invariant [stable addresses], docs/design.md). Two ways
to drive it (docs/python.md):

- statickv.hf.generate (managed): the loop calls begin_step() on the host
  before each forward; C++ prepare() plans the step (write slots, statickv's
  own masks per layer type); inside the forward update() only runs
  torch.ops.statickv.cache_write and returns views, so a compiled forward has
  no graph break and no copy of the cache.
- plain model.generate: transformers builds the masks from get_mask_sizes();
  the first layer's update() plans the step on the host (so this mode is for
  eager forwards), and sliding layers return their ring in position order,
  which is what transformers' sliding-window mask assumes.
"""

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

import statickv

FULL, SLIDING = "full_attention", "sliding_attention"
_NATIVE_TYPES = {FULL: statickv.LayerType.FULL, SLIDING: statickv.LayerType.SLIDING}


def layer_types_of(config):
    """The attention type of each layer of a transformers config, checked."""
    text = config.get_text_config(decoder=True)
    types = getattr(text, "layer_types", None)
    if types is None:
        sliding = getattr(text, "sliding_window", None)
        types = [SLIDING if sliding else FULL] * text.num_hidden_layers
    for i, name in enumerate(types):
        if name not in _NATIVE_TYPES:
            raise ValueError(
                f"config.layer_types[{i}]: expected {FULL!r} or {SLIDING!r} but got {name!r} "
                "(statickv caches full-attention and sliding-window layers only)"
            )
    return list(types)


def _buckets(value, default):
    if value is None:
        return default
    if isinstance(value, statickv.ShapeBuckets):
        return value
    return statickv.ShapeBuckets.of(list(value))


def native_config(config, max_batch_size, max_cache_len, device, dtype, max_chunk):
    """The statickv.CacheConfig for a transformers model config."""
    text = config.get_text_config(decoder=True)
    types = layer_types_of(config)
    native = statickv.CacheConfig()
    native.num_layers = text.num_hidden_layers
    native.num_kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    head_dim = getattr(text, "head_dim", None)
    native.head_dim = head_dim or text.hidden_size // text.num_attention_heads
    native.max_batch = max_batch_size
    native.max_len = max_cache_len
    config_dtype = getattr(text, "dtype", None)
    default = config_dtype if isinstance(config_dtype, torch.dtype) else torch.float32
    native.dtype = dtype if dtype is not None else default
    native.device = torch.device(device if device is not None else "cpu")
    native.layer_types = [_NATIVE_TYPES[t] for t in types]
    if SLIDING in types:
        native.sliding_window = text.sliding_window
    native.max_chunk = max_chunk or 0
    return native, types


class StaticKVLayer(CacheLayerMixin):
    """One layer's view of a StaticKVCache: its two whole buffers (scratch
    slot included), the same storage as the C++ cache's."""

    is_compileable = False  # transformers must not auto-compile plain generate
    supports_early_init = False

    def __init__(self, cache, layer_idx, sliding):
        super().__init__()
        self.cache = cache
        self.layer_idx = layer_idx
        self.is_sliding = sliding
        self.keys = cache.native.keys(layer_idx)
        self.values = cache.native.values(layer_idx)
        self.batch_size = cache.max_batch_size
        self.device = self.keys.device
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states):
        pass  # allocated once, in the constructor

    def update(self, key_states, value_states, *args, **kwargs):
        return self.cache.update(key_states, value_states, self.layer_idx)

    def get_mask_sizes(self, query_length):
        return self.cache.get_mask_sizes(query_length, self.layer_idx)

    def get_seq_length(self):
        return self.cache.get_seq_length()

    def get_max_length(self):
        return self.cache.max_cache_len


class StaticKVCache(Cache):
    """A transformers Cache for Llama, Mistral and Qwen2 over statickv's
    HybridCache (or StaticCache when every layer is full attention).

    device: default CPU; dtype: default the config's dtype (float32 when it
    names none). max_chunk: the most tokens one step may carry (default:
    the sliding window with sliding layers, else max_cache_len); a sliding
    ring holds sliding_window + max_chunk - 1 positions (Note [ring capacity]).

    batch_buckets: decode batch sizes (default powers of two up to
    max_batch_size); prefill_batch_buckets: prefill batch sizes (default the
    largest batch bucket only, so prefill graphs are one per prompt bucket);
    prompt_buckets: prefill chunk lengths (default powers of two from 16 up to
    the largest chunk a step may carry, max_chunk). All apply to
    statickv.hf.generate; plain model.generate runs at the shapes it makes.
    """

    def __init__(self, config, max_batch_size, max_cache_len, device=None, dtype=None, *,
                 max_chunk=None, batch_buckets=None, prefill_batch_buckets=None,
                 prompt_buckets=None):
        native, types = native_config(config, max_batch_size, max_cache_len, device, dtype,
                                      max_chunk)
        kind = statickv.HybridCache if SLIDING in types else statickv.StaticCache
        self.native = kind(native)
        self.max_batch_size = max_batch_size
        self.max_cache_len = max_cache_len
        self.layer_types = types
        self.max_chunk = self.native.config.effective_max_chunk()
        self.batch_buckets = _buckets(batch_buckets,
                                      statickv.ShapeBuckets.powers_of_two(max_batch_size))
        self.prefill_batch_buckets = _buckets(prefill_batch_buckets,
                                              statickv.ShapeBuckets.of([self.batch_buckets.max]))
        self.prompt_buckets = _buckets(
            prompt_buckets, statickv.ShapeBuckets.powers_of_two(self.max_chunk,
                                                                min(16, self.max_chunk)))
        self._check_buckets()
        layers = [StaticKVLayer(self, i, t == SLIDING) for i, t in enumerate(types)]
        super().__init__(layers=layers)
        for layer in layers:  # CUDA graphs may bake these addresses in
            torch._dynamo.mark_static_address(layer.keys)
            torch._dynamo.mark_static_address(layer.values)
        self._managed = False  # True inside statickv.hf.generate
        self._seen = 0  # plain generate: columns already stored
        self._plan = None
        self._slots = [None] * len(types)
        self._view_lens = [0] * len(types)
        self._live_batch = 0
        self._kv_offset = 0

    def _check_buckets(self):
        for name, buckets, limit, what in (
            ("batch_buckets", self.batch_buckets, self.max_batch_size, "max_batch_size"),
            ("prefill_batch_buckets", self.prefill_batch_buckets, self.max_batch_size,
             "max_batch_size"),
            ("prompt_buckets", self.prompt_buckets, self.max_chunk, "max_chunk"),
        ):
            if buckets.max > limit:
                raise ValueError(f"{name}: expected sizes <= {what}={limit} but got "
                                 f"{buckets.sizes()}")

    # -- the step -----------------------------------------------------------

    def begin_step(self, positions, live_batch):
        """Plans one forward on the host (C++ prepare: slots, masks, and the
        bookkeeping advanced). positions: int64 [live_batch, q], -1 = padding.
        Returns the attention masks per layer type, as transformers takes
        them: one 4-D additive mask when every layer has one type, else a dict
        {"full_attention": ..., "sliding_attention": ...}."""
        plan = self.native.prepare(positions, live_batch, self.max_cache_len)
        self._use_plan(plan)
        masks = {}
        for i, name in enumerate(self.layer_types):
            masks.setdefault(name, plan.additive_mask(i))
        return next(iter(masks.values())) if len(masks) == 1 else masks

    def _use_plan(self, plan):
        self._plan = plan
        self._live_batch = plan.live_batch
        self._slots = [plan.write_slots(i) for i in range(len(self.layers))]
        self._view_lens = [plan.view_len(i) for i in range(len(self.layers))]

    def _plain_step(self, key_states):
        """Plain generate: plan the step from the columns transformers feeds
        (every row at the same positions, as transformers' StaticCache)."""
        q = key_states.shape[-2]
        positions = torch.arange(self._seen, self._seen + q, device=key_states.device)
        # Full layers expose exactly the columns stored (as transformers'
        # DynamicCache does): with max_cache_len columns, its sdpa path would
        # drop the mask of an unpadded decode step and attend to empty slots.
        attend = min(self._seen + q, self.max_cache_len)
        self._use_plan(self.native.prepare(positions, key_states.shape[0], attend))
        self._kv_offset = self._sliding_offset(q)
        self._seen += q

    def _sliding_offset(self, query_length):
        """Plain generate: the position the rotated ring starts at (0 before
        it wraps), the kv_offset transformers' sliding mask is given."""
        if SLIDING not in self.layer_types:
            return 0
        capacity = self.native.capacity(self.layer_types.index(SLIDING))
        return max(self._seen + query_length - capacity, 0)

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        """Writes one layer's new keys and values with
        torch.ops.statickv.cache_write and returns views of the buffers."""
        if not self._managed and layer_idx == 0:
            self._plain_step(key_states)
        layer = self.layers[layer_idx]
        torch.ops.statickv.cache_write(layer.keys, layer.values, key_states, value_states,
                                       self._slots[layer_idx])
        b, n = self._live_batch, self._view_lens[layer_idx]
        keys, values = layer.keys[:b, :, :n], layer.values[:b, :, :n]
        if not self._managed and layer.is_sliding and self._kv_offset > 0:
            # transformers' sliding mask reads key index i as position
            # kv_offset + i: hand it the ring in position order.
            order = (torch.arange(n, device=keys.device) + self._kv_offset) % n
            keys, values = keys.index_select(2, order), values.index_select(2, order)
        return keys, values

    # -- what transformers asks -------------------------------------------------

    def get_mask_sizes(self, query_length, layer_idx=0):
        if self.layer_types[layer_idx] == FULL:  # plain generate; see _plain_step
            return self._seen + query_length, 0
        return self.native.capacity(layer_idx), self._sliding_offset(query_length)

    def get_seq_length(self, layer_idx=0):
        return self._seen

    def get_max_length(self, layer_idx=None):
        return self.max_cache_len

    @property
    def is_compileable(self):
        return False

    def reset(self):
        """Empties every row (zeroes buffers and bookkeeping in place)."""
        self.native.reset()
        self._seen = 0
        self._plan = None

    def reset_rows(self, rows):
        self.native.reset_rows(torch.as_tensor(rows, dtype=torch.long))
        self._plan = None

    def reorder_cache(self, beam_idx):
        self.native.reorder(beam_idx)
        self._plan = None

    def crop(self, tokens_to_remove):
        raise NotImplementedError("StaticKVCache.crop: not supported (positions are kept per slot)")

    def batch_repeat_interleave(self, repeats):
        raise NotImplementedError("StaticKVCache.batch_repeat_interleave: not supported")

    def batch_select_indices(self, indices):
        raise NotImplementedError("StaticKVCache.batch_select_indices: not supported")
