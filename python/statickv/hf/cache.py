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

import copy

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

import statickv

FULL, SLIDING = "full_attention", "sliding_attention"
_NATIVE_TYPES = {FULL: statickv.LayerType.FULL, SLIDING: statickv.LayerType.SLIDING}
# kv_dtype -> the C++ storage (Note [quantized storage], docs/design.md).
KV_DTYPES = {None: statickv.KvStorage.COMPUTE, "int8": statickv.KvStorage.INT8,
             "fp8": statickv.KvStorage.FP8_E4M3}
_STORED = {"int8": torch.int8, "fp8": torch.float8_e4m3fn}


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


def check_kv_dtype(kv_dtype, dtype, device):
    """Refuses, before anything is allocated, a kv_dtype that is not one of
    KV_DTYPES, a compute dtype quantized storage does not take, or a device
    that cannot store the codes."""
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"kv_dtype: expected None, 'int8' or 'fp8' but got {kv_dtype!r}")
    if kv_dtype is None:
        return
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"dtype: expected float32, float16 or bfloat16 with kv_dtype={kv_dtype!r} "
                         f"(quantized storage dequantizes into the compute dtype) but got {dtype}")
    try:
        torch.zeros(1, dtype=dtype, device=device).to(_STORED[kv_dtype]).to(dtype)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"kv_dtype: expected a storage type device {device} can convert to and "
                         f"from {dtype} but {kv_dtype!r} cannot be: {error}") from None


def native_config(config, max_batch_size, max_cache_len, device, dtype, max_chunk,
                  kv_dtype=None):
    """The statickv.CacheConfig for a transformers model config (kv_dtype
    checked by check_kv_dtype)."""
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
    check_kv_dtype(kv_dtype, native.dtype, native.device)
    native.kv_storage = KV_DTYPES[kv_dtype]
    return native, types


def estimate_memory(config, max_batch_size, max_cache_len, device=None, dtype=None, *,
                    max_chunk=None, kv_dtype=None):
    """The bytes a StaticKVCache built with these arguments holds, without
    allocating it: {"device": ..., "host": 0} (statickv.estimate_memory of
    its CacheConfig; equals cache.memory_bytes())."""
    native, _ = native_config(config, max_batch_size, max_cache_len, device, dtype, max_chunk,
                              kv_dtype)
    return statickv.estimate_memory(native)


def dequantize(codes, scales, dtype):
    """Stored codes [b, h, n, d] times their float32 scales [b, h, n, 1], in
    the compute dtype: the values the C++ cache's update() stages (a
    conversion and one multiply, rounded once)."""
    return (codes.to(dtype) * scales).to(dtype)


class StaticKVLayer(CacheLayerMixin):
    """One layer's view of a StaticKVCache: its two whole buffers (scratch
    slot included), the same storage as the C++ cache's. With kv_dtype,
    keys and values hold the codes (int8 or float8_e4m3fn) and key_scales,
    value_scales their float32 scales [max_batch, kv_heads, slots, 1]."""

    is_compileable = False  # transformers must not auto-compile plain generate
    is_croppable = True  # crop() rolls back exactly (Note [ring rollback])
    supports_early_init = False

    def __init__(self, cache, layer_idx, sliding):
        super().__init__()
        self.cache = cache
        self.layer_idx = layer_idx
        self.is_sliding = sliding
        self.keys = cache.native.keys(layer_idx)
        self.values = cache.native.values(layer_idx)
        self.key_scales = self.value_scales = None
        if cache.kv_dtype is not None:
            self.key_scales = cache.native.key_scales(layer_idx)
            self.value_scales = cache.native.value_scales(layer_idx)
        self.compute_dtype = cache.native.config.dtype
        self.batch_size = cache.max_batch_size
        self.device = self.keys.device
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states):
        pass  # allocated once, in the constructor

    def buffers(self):
        """Every tensor that holds this layer's rows (scales included)."""
        if self.key_scales is None:
            return [self.keys, self.values]
        return [self.keys, self.values, self.key_scales, self.value_scales]

    def write(self, key_states, value_states, slots):
        """The step's keys and values into the buffers at slots, through
        one operator (quantized on the way in with kv_dtype)."""
        if self.key_scales is None:
            torch.ops.statickv.cache_write(self.keys, self.values, key_states, value_states, slots)
        else:
            torch.ops.statickv.cache_write_quantized(self.keys, self.values, self.key_scales,
                                                     self.value_scales, key_states, value_states,
                                                     slots)

    def read(self, b, n):
        """Rows 0..b-1, slots 0..n-1, in the compute dtype: views of the
        buffers, or with kv_dtype their dequantized values."""
        return self._read(lambda t: t[:b, :, :n])

    def read_slots(self, b, slots):
        """Rows 0..b-1 at slots [q] (a step's own, just written), as read()
        gives them: what attention sees of the step's keys and values."""
        return self._read(lambda t: t[:b].index_select(2, slots))

    def _read(self, select):
        """select() of keys and values, dequantized with their scales' select()."""
        keys, values = select(self.keys), select(self.values)
        if self.key_scales is None:
            return keys, values
        return (dequantize(keys, select(self.key_scales), self.compute_dtype),
                dequantize(values, select(self.value_scales), self.compute_dtype))

    def update(self, key_states, value_states, *args, **kwargs):
        return self.cache.update(key_states, value_states, self.layer_idx)

    def get_mask_sizes(self, query_length):
        return self.cache.get_mask_sizes(query_length, self.layer_idx)

    def get_seq_length(self):
        return self.cache.get_seq_length()

    def get_max_length(self):
        return self.cache.max_cache_len


class StaticKVCache(Cache):
    """A transformers Cache for Llama, Mistral, Qwen2 and Gemma 2/3 over statickv's
    HybridCache (or StaticCache when every layer is full attention).

    device: default CPU; dtype: default the config's dtype (float32 when it
    names none). max_chunk: the most tokens one step may carry (default:
    the sliding window with sliding layers, else max_cache_len); a sliding
    ring holds sliding_window + max_chunk - 1 positions (Note [ring capacity]).

    batch_buckets: decode batch sizes (default powers of two up to
    max_batch_size); prefill_batch_buckets: prefill batch sizes (default the
    largest batch bucket only, so prefill graphs are one per prompt bucket);
    prompt_buckets: prefill chunk lengths (default powers of two from 16 up to
    the largest chunk a step may carry, max_chunk); verify_buckets: the
    lengths a speculative verification step (prompt lookup, assisted
    decoding) pads to (default powers of two up to max_chunk). All apply to
    statickv.hf.generate; plain model.generate runs at the shapes it makes.

    kv_dtype: None (store in the compute dtype), "int8" or "fp8" (e4m3):
    codes plus one float32 scale per token and kv head, quantized inside
    the cache-write operator and dequantized for attention in the same
    traced region (docs/python.md, Quantized storage).
    """

    def __init__(self, config, max_batch_size, max_cache_len, device=None, dtype=None, *,
                 max_chunk=None, batch_buckets=None, prefill_batch_buckets=None,
                 prompt_buckets=None, verify_buckets=None, kv_dtype=None):
        native, types = native_config(config, max_batch_size, max_cache_len, device, dtype,
                                      max_chunk, kv_dtype)
        kind = statickv.HybridCache if SLIDING in types else statickv.StaticCache
        self.native = kind(native)
        self.kv_dtype = kv_dtype
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
        self.verify_buckets = _buckets(verify_buckets,
                                       statickv.ShapeBuckets.powers_of_two(self.max_chunk))
        self._check_buckets()
        layers = [StaticKVLayer(self, i, t == SLIDING) for i, t in enumerate(types)]
        super().__init__(layers=layers)
        _mark_static(layers)
        self._managed = False  # True inside statickv.hf.generate
        self._seen = 0  # plain generate: columns already stored
        self._plan = None
        self._slots = [None] * len(types)
        self._view_lens = [0] * len(types)
        self._live_batch = 0
        self._kv_offset = 0
        self._long = None  # plain generate: a step longer than max_chunk, in chunks

    def _check_buckets(self):
        for name, buckets, limit, what in (
            ("batch_buckets", self.batch_buckets, self.max_batch_size, "max_batch_size"),
            ("prefill_batch_buckets", self.prefill_batch_buckets, self.max_batch_size,
             "max_batch_size"),
            ("prompt_buckets", self.prompt_buckets, self.max_chunk, "max_chunk"),
            ("verify_buckets", self.verify_buckets, self.max_chunk, "max_chunk"),
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
        (every row at the same positions, as transformers' StaticCache). A
        step longer than max_chunk (a long prompt) is written in chunks of
        max_chunk, layer by layer (_long_update)."""
        q = key_states.shape[-2]
        b = key_states.shape[0]
        self._check_plain_step(b, q)
        self._long = None
        if q > self.max_chunk:
            self._long = self._long_chunks(q, b, key_states.device)
            self._live_batch = b
            self._seen += q
            return
        positions = torch.arange(self._seen, self._seen + q, device=key_states.device)
        # Full layers expose exactly the columns stored (as transformers'
        # DynamicCache does): with max_cache_len columns, its sdpa path would
        # drop the mask of an unpadded decode step and attend to empty slots.
        attend = min(self._seen + q, self.max_cache_len)
        self._use_plan(self.native.prepare(positions, b, attend))
        self._kv_offset = self._sliding_offset(q)
        self._seen += q

    def _check_plain_step(self, b, q):
        """Refuses, before anything is written, a step the buffers cannot hold."""
        if b > self.max_batch_size:
            raise ValueError(f"batch: expected at most max_batch_size={self.max_batch_size} "
                             f"rows (beam search: batch * num_beams) but got {b}")
        if self._seen + q > self.max_cache_len:
            raise ValueError(f"max_cache_len: expected the cache to hold {self._seen} + {q} = "
                             f"{self._seen + q} positions but it holds {self.max_cache_len}")

    def _long_chunks(self, q, b, device):
        """A long step's chunks: (first position, length) of at most max_chunk."""
        chunks = []
        for start in range(self._seen, self._seen + q, self.max_chunk):
            chunks.append((start, min(self.max_chunk, self._seen + q - start)))
        return chunks

    def _long_update(self, layer, key_states, value_states):
        """One layer of a long plain step. Sliding layers return the window
        before the step (read from the ring first, in position order)
        followed by the step's own keys, which is what get_mask_sizes
        describes (as stored: dequantized with kv_dtype); full layers return
        the stored columns. Each chunk is
        planned with prepare(), once per layer: the bookkeeping ends as one
        plan of the whole step would leave it (the last layer's last chunk
        is the newest), and the views of this step never read it."""
        b = self._live_batch
        seen = self._seen - key_states.shape[-2]  # before this step
        past = None
        if layer.is_sliding:
            start = self._long_window_start(seen)
            capacity = self.native.capacity(layer.layer_idx)
            order = torch.arange(start, seen, device=layer.keys.device) % capacity
            ring = layer.read(b, capacity)
            past = (ring[0].index_select(2, order), ring[1].index_select(2, order))
        own = ([], [])  # the step's keys and values as stored (quantized caches)
        for first, n in self._long:
            positions = torch.arange(first, first + n, device=key_states.device)
            plan = self.native.prepare(positions, b, first + n)
            offset = first - seen
            slots = plan.write_slots(layer.layer_idx)
            layer.write(key_states[:, :, offset:offset + n], value_states[:, :, offset:offset + n],
                        slots)
            if past is not None and layer.key_scales is not None:
                # read back before a later chunk overwrites the ring
                for mine, stored in zip(own, layer.read_slots(b, slots)):
                    mine.append(stored)
        if past is None:
            return layer.read(b, self._seen)
        if layer.key_scales is None:  # stored exactly as given
            own = ([key_states], [value_states])
        return torch.cat([past[0], *own[0]], 2), torch.cat([past[1], *own[1]], 2)

    def _long_window_start(self, seen):
        """The first past position a long step's sliding queries can see."""
        window = self.native.config.sliding_window
        return max(seen - (window - 1), 0)

    def _sliding_offset(self, query_length):
        """Plain generate: the position the rotated ring starts at (0 before
        it wraps), the kv_offset transformers' sliding mask is given."""
        if SLIDING not in self.layer_types:
            return 0
        capacity = self.native.capacity(self.layer_types.index(SLIDING))
        return max(self._seen + query_length - capacity, 0)

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        """Writes one layer's new keys and values with
        torch.ops.statickv.cache_write (cache_write_quantized with kv_dtype)
        and returns views of the buffers (their dequantized values)."""
        if not self._managed and layer_idx == 0:
            self._plain_step(key_states)
        layer = self.layers[layer_idx]
        if not self._managed and self._long is not None:
            return self._long_update(layer, key_states, value_states)
        layer.write(key_states, value_states, self._slots[layer_idx])
        keys, values = layer.read(self._live_batch, self._view_lens[layer_idx])
        n = keys.shape[2]
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
        if query_length > self.max_chunk:  # a long step: the past window, then its own keys
            start = self._long_window_start(self._seen)
            return self._seen + query_length - start, start
        return self.native.capacity(layer_idx), self._sliding_offset(query_length)

    def get_seq_length(self, layer_idx=0):
        return self._seen

    def get_max_length(self, layer_idx=None):
        return self.max_cache_len

    def memory_bytes(self):
        """Bytes this cache holds (codes, scales and the C++ cache's staging
        buffer with kv_dtype); equals estimate_memory's "device" figure."""
        return self.native.memory_bytes()

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
        """Beam search: row i becomes old row beam_idx[i] (any integer dtype,
        any device; transformers passes int32 on some paths)."""
        beam_idx = torch.as_tensor(beam_idx)
        if beam_idx.dtype.is_floating_point or beam_idx.dtype.is_complex or \
                beam_idx.dtype == torch.bool:
            raise ValueError(f"beam_idx: expected an integer dtype but got {beam_idx.dtype}")
        self.native.reorder(beam_idx.to(torch.long))
        self._plan = None

    def crop(self, tokens_to_remove):
        """Removes the `-tokens_to_remove` newest positions of every row
        (transformers' assisted and prompt-lookup decoding take back rejected
        candidates so), through the C++ rollback: rings included, exactly,
        as deep as Note [ring rollback] allows (max_chunk positions past the
        newest ever written). 0 removes nothing; a positive value is refused
        as DynamicCache refuses it."""
        if tokens_to_remove > 0:
            raise ValueError(f"tokens_to_remove: expected 0 or a negative number (the count of "
                             f"newest positions to remove) but got {tokens_to_remove}, as "
                             "DynamicCache.crop")
        remove = -int(tokens_to_remove)
        if remove == 0 or self._seen == 0:
            return
        if remove > self._seen:
            raise ValueError(f"tokens_to_remove: expected at most the {self._seen} positions "
                             f"stored but got {tokens_to_remove}")
        rows = max(self._live_batch, 1)
        try:
            self.native.rollback([self._seen - remove] * rows)
        except RuntimeError as error:
            raise ValueError(f"tokens_to_remove: {tokens_to_remove} is deeper than a sliding "
                             f"ring can take back exactly (at most max_chunk={self.max_chunk} "
                             "positions; keep num_assistant_tokens and "
                             "prompt_lookup_num_tokens below max_chunk, or build the cache "
                             f"with a larger max_chunk): {error}") from None
        self._seen -= remove
        self._plan = None

    def __deepcopy__(self, memo):
        """An independent cache: its own buffers (C++ copy_from), equal
        contents and positions; later changes to one are invisible in the
        other. copy.copy stays shallow, as for any object and DynamicCache."""
        new = copy.copy(self)
        memo[id(self)] = new
        new.native = type(self.native)(self.native.config)
        new.native.copy_from(self.native)
        new.layers = [StaticKVLayer(new, i, t == SLIDING) for i, t in enumerate(self.layer_types)]
        _mark_static(new.layers)
        new._plan = None
        new._slots = [None] * len(self.layer_types)
        new._view_lens = [0] * len(self.layer_types)
        new._long = None
        return new

    def batch_repeat_interleave(self, repeats):
        raise NotImplementedError("StaticKVCache.batch_repeat_interleave: not supported")

    def batch_select_indices(self, indices):
        raise NotImplementedError("StaticKVCache.batch_select_indices: not supported")


def _mark_static(layers):
    """CUDA graphs may bake these addresses in: dynamo treats them as static."""
    for layer in layers:
        for buffer in layer.buffers():
            torch._dynamo.mark_static_address(buffer)
