"""StaticKVCache(kv_dtype="int8" | "fp8"): quantized KV storage for
transformers users, held to three references.

- The C++ cache: torch.ops.statickv.cache_write_quantized stores the codes
  and scales the C++ cache's own update() stores, bit for bit, and the
  dequantized views are the ones it stages.
- transformers with the same quantization: a DynamicCache whose update()
  rounds keys and values through the specification below (one scale per
  token and kv head, amax / qmax) gives the tokens the quantized cache gives,
  in every generate mode (greedy, beams, prompt lookup, assisted, prefix
  reuse through deepcopy, long prompts past the sliding window).
- The unquantized cache under torch.compile(fullgraph=True, dynamic=False):
  the seeds' scenarios compile the same graphs, one per bucket, no more.
"""

import copy
import re

import pytest
import torch
import transformers
from torch._inductor.utils import run_and_get_code

import statickv
import statickv.hf as skh
from conftest import (GraphRecorder, any_model, assert_same, left_padded, repeating, snapshot,
                      tiny_model)

KV_DTYPES = ["int8", "fp8"]


def round_trip(x, kv_dtype):
    """The storage's specification, written apart from the C++: per token and
    kv head, scale = amax(|x|) / qmax (127 for int8, 448 for float8 e4m3fn),
    codes = x / scale rounded (int8) or converted (fp8), read back as
    codes * scale in x's dtype."""
    qmax = 127.0 if kv_dtype == "int8" else 448.0
    xf = x.float()
    scale = xf.abs().amax(-1, keepdim=True) / qmax
    scaled = (xf / scale.clamp_min(torch.finfo(torch.float32).tiny)).clamp(-qmax, qmax)
    codes = scaled.round().to(torch.int8) if kv_dtype == "int8" else scaled.to(
        torch.float8_e4m3fn)
    return (codes.to(x.dtype) * scale).to(x.dtype)


class RoundTripCache(transformers.DynamicCache):
    """transformers' DynamicCache holding keys and values as a quantized
    cache reads them back."""

    def __init__(self, kv_dtype, **kwargs):
        super().__init__(**kwargs)
        self.kv_dtype = kv_dtype

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        return super().update(round_trip(key_states, self.kv_dtype),
                              round_trip(value_states, self.kv_dtype), layer_idx, *args, **kwargs)


def quantized(model, kv_dtype, max_batch_size=4, max_cache_len=96, max_chunk=16, **kwargs):
    return skh.StaticKVCache(model.config, max_batch_size=max_batch_size,
                             max_cache_len=max_cache_len, max_chunk=max_chunk, kv_dtype=kv_dtype,
                             **kwargs)


def reference(model, kv_dtype, ids, mask, new, **kwargs):
    return model.generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False,
                          cache=RoundTripCache(kv_dtype, config=model.config), **kwargs)


def greedy(model, ids, mask, new, cache, **kwargs):
    return model.generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False,
                          cache=cache, **kwargs)


# -- the operator is the C++ cache's write -------------------------------------------


def native_twins(kv_dtype, dtype):
    config = statickv.CacheConfig()
    config.num_layers, config.num_kv_heads, config.head_dim = 1, 2, 8
    config.max_batch, config.max_len, config.dtype = 3, 16, dtype
    config.kv_storage = skh.cache.KV_DTYPES[kv_dtype]
    return statickv.StaticCache(config), statickv.StaticCache(config)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_the_operator_stores_what_the_cpp_cache_stores(kv_dtype, dtype):
    cpp, ours = native_twins(kv_dtype, dtype)
    gen = torch.Generator().manual_seed(0)
    steps = [torch.arange(5), torch.tensor([[5, 6], [9, -1]])]  # shared slots, then per row
    for positions in steps:
        rows, q = 2, positions.shape[-1]
        key = (torch.randn(rows, 2, q, 8, generator=gen) * 3).to(dtype)
        value = torch.randn(rows, 2, q, 8, generator=gen).to(dtype)
        expected = cpp.update(0, key, value, cpp.prepare(positions, rows))
        plan = ours.prepare(positions, rows)
        torch.ops.statickv.cache_write_quantized(ours.keys(0), ours.values(0), ours.key_scales(0),
                                                 ours.value_scales(0), key, value,
                                                 plan.write_slots(0))
        for read in (lambda c: c.keys(0), lambda c: c.values(0), lambda c: c.key_scales(0),
                     lambda c: c.value_scales(0)):
            assert torch.equal(read(cpp).view(torch.uint8), read(ours).view(torch.uint8))
        n = plan.view_len(0)
        for staged, codes, scales in ((expected[0], ours.keys(0), ours.key_scales(0)),
                                      (expected[1], ours.values(0), ours.value_scales(0))):
            read_back = skh.cache.dequantize(codes[:rows, :, :n], scales[:rows, :, :n], dtype)
            assert torch.equal(staged[:, :, :n], read_back)


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_the_operator_refuses_bad_buffers_before_writing(kv_dtype):
    _, cache = native_twins(kv_dtype, torch.float32)
    before = [t.clone() for t in (cache.keys(0), cache.key_scales(0))]
    key = torch.randn(1, 2, 1, 8)
    slots = torch.tensor([0])
    args = [cache.keys(0), cache.values(0), cache.key_scales(0), cache.value_scales(0)]
    cases = [
        (dict(key_scales=cache.key_scales(0).double()), "key_scales: expected"),
        (dict(value_scales=cache.value_scales(0)[:, :, :4]), "value_scales: expected a contig"),
        (dict(keys=cache.keys(0).float(), values=cache.values(0).float()),
         "keys: expected quantized codes"),
        (dict(key=key.double(), value=key.double()), "key: expected the compute dtype"),
        (dict(slots=torch.tensor([0, 1])), "slots: expected [q] = [1]"),
    ]
    names = ["keys", "values", "key_scales", "value_scales", "key", "value", "slots"]
    for change, message in cases:
        call = dict(zip(names, args + [key, key, slots]))
        call.update(change)
        with pytest.raises(RuntimeError, match=re.escape(message)):
            torch.ops.statickv.cache_write_quantized(*[call[n] for n in names])
        assert torch.equal(cache.keys(0).view(torch.uint8), before[0].view(torch.uint8))
        assert torch.equal(cache.key_scales(0), before[1])


# -- every generate mode equals transformers with the same quantization -----------


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "gemma3"])
def test_plain_and_statickv_generate_equal_transformers_with_the_same_rounding(kind, kv_dtype):
    model = any_model(kind)
    ids, mask = left_padded([21, 9])  # past the window (8) and max_chunk (16)
    expected = reference(model, kv_dtype, ids, mask, 12)
    assert torch.equal(greedy(model, ids, mask, 12, quantized(model, kv_dtype)), expected)
    ours = skh.generate(model, quantized(model, kv_dtype), ids, attention_mask=mask,
                        max_new_tokens=12)
    assert torch.equal(ours, expected)


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_a_quantized_cache_holds_codes_and_one_scale_per_token_and_head(kv_dtype):
    model = tiny_model("qwen2")
    cache = quantized(model, kv_dtype)
    ids, _ = left_padded([11])
    with torch.no_grad():
        model(input_ids=ids, cache=cache, use_cache=True)
    stored = {"int8": torch.int8, "fp8": torch.float8_e4m3fn}[kv_dtype]
    for layer in cache.layers:
        assert layer.keys.dtype == layer.values.dtype == stored
        assert layer.key_scales.dtype == torch.float32
        assert layer.key_scales.shape == (*layer.keys.shape[:3], 1)
        written = layer.key_scales[0, :, :11]
        assert bool((written > 0).all()) and bool((layer.key_scales[1:] == 0).all())


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_beam_search_reorders_codes_and_scales_together(kv_dtype):
    model = tiny_model("qwen2")
    ids, mask = left_padded([9, 5])
    kwargs = dict(num_beams=2, max_new_tokens=8)
    expected = reference(model, kv_dtype, ids, mask, 8, num_beams=2)
    plain = greedy(model, ids, mask, 8, quantized(model, kv_dtype), num_beams=2)
    assert torch.equal(plain, expected)
    cache = quantized(model, kv_dtype)
    assert torch.equal(skh.generate(model, cache, ids, attention_mask=mask, **kwargs), expected)
    buffers, _ = cache._beam_scratch
    assert len(buffers) == 4  # codes and scales, for full layers and for rings


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_prompt_lookup_and_assisted_decoding_crop_as_transformers_does(kind, kv_dtype):
    model = any_model(kind)
    ids, mask = repeating([24])
    expected = reference(model, kv_dtype, ids, mask, 14)
    lookup = dict(prompt_lookup_num_tokens=6)
    assert torch.equal(greedy(model, ids, mask, 14, quantized(model, kv_dtype), **lookup),
                       expected)
    ours = skh.generate(model, quantized(model, kv_dtype), ids, attention_mask=mask,
                        max_new_tokens=14, **lookup)
    assert torch.equal(ours, expected)
    assisted = dict(assistant_model=tiny_model(kind, seed=5), num_assistant_tokens=4)
    ours = skh.generate(model, quantized(model, kv_dtype), ids, attention_mask=mask,
                        max_new_tokens=14, **assisted)
    assert torch.equal(ours, expected)


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_deepcopy_copies_codes_and_scales_and_serves_prefix_reuse(kv_dtype):
    model = tiny_model("mistral")
    prefix, _ = left_padded([14], seed=1)
    prefix_cache = quantized(model, kv_dtype)
    with torch.no_grad():
        model(input_ids=prefix, cache=prefix_cache, use_cache=True)
    clone = copy.deepcopy(prefix_cache)
    for a, b in zip(prefix_cache.layers, clone.layers):
        for mine, theirs in zip(a.buffers(), b.buffers()):
            assert mine.data_ptr() != theirs.data_ptr()
            assert torch.equal(mine.view(torch.uint8), theirs.view(torch.uint8))
    suffix, _ = left_padded([5], seed=2)
    prompt = torch.cat([prefix, suffix], 1)
    expected = reference(model, kv_dtype, prompt, None, 8)
    assert torch.equal(greedy(model, prompt, None, 8, clone), expected)
    before = snapshot(prefix_cache)
    clone.reset()
    assert_same(before, snapshot(prefix_cache))


# -- memory --------------------------------------------------------------------


def smollm2_config():
    """SmolLM2-135M's shape (no weights): 30 layers, 3 kv heads, head_dim 64."""
    return transformers.LlamaConfig(hidden_size=576, num_attention_heads=9,
                                    num_key_value_heads=3, num_hidden_layers=30,
                                    intermediate_size=1536, vocab_size=49152)


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_smollm2_bytes_are_at_most_0_57_of_bf16_as_estimated_and_held(kv_dtype):
    config = smollm2_config()
    args = dict(max_batch_size=2, max_cache_len=1024, dtype=torch.bfloat16)
    plain = skh.estimate_memory(config, **args)["device"]
    ours = skh.estimate_memory(config, **args, kv_dtype=kv_dtype)
    cache = skh.StaticKVCache(config, **args, kv_dtype=kv_dtype)
    assert ours == {"device": cache.memory_bytes(), "host": 0}
    slots = 30 * 2 * 2 * 3 * 1025  # layers, keys and values, rows, heads, slots (+ scratch)
    bookkeeping = plain - slots * 64 * 2  # slot positions and lengths, as unquantized
    assert cache.native.staging_bytes() == 2 * 2 * 3 * 1024 * 64 * 2  # one bf16 layer's view
    assert ours["device"] == slots * (64 + 4) + cache.native.staging_bytes() + bookkeeping
    assert ours["device"] / plain <= 0.57
    assert ours["device"] / plain == pytest.approx((64 + 4) / 128 + 1 / 30, abs=1e-3)


# -- refusals ------------------------------------------------------------------


def test_a_kv_dtype_the_cache_cannot_store_is_refused_naming_it(monkeypatch):
    model = tiny_model("llama")
    with pytest.raises(ValueError, match=r"kv_dtype: expected None, 'int8' or 'fp8' but got "
                                         r"'int4'"):
        quantized(model, "int4")
    with pytest.raises(ValueError, match=r"dtype: expected float32, float16 or bfloat16 with "
                                         r"kv_dtype='fp8'.*but got torch.float64"):
        quantized(model, "fp8", dtype=torch.float64)
    with pytest.raises(ValueError, match=r"dtype: .* with kv_dtype='int8'"):
        skh.estimate_memory(model.config, 1, 32, dtype=torch.float64, kv_dtype="int8")
    # A device without the conversion (float8 on some accelerators) fails the probe.
    monkeypatch.setitem(skh.cache._STORED, "fp8", "not a dtype")
    with pytest.raises(ValueError, match=r"kv_dtype: expected a storage type device cpu can "
                                         r"convert to and from torch.float32 but 'fp8'"):
        quantized(model, "fp8")


# -- torch.compile: the unquantized cache's graphs ----------------------------------


def compiled(model, backend):
    model.forward = torch.compile(model.forward, backend=backend, dynamic=False, fullgraph=True)
    return model


def seeds(model, cache, eager_cache):
    """The seeds' scenarios: batch 4, 2, 3, 1 on one instance, then prompts
    of new lengths; each against the same quantized cache run eagerly."""
    eager = tiny_model("qwen2")
    runs = [left_padded(n, s) for s, n in enumerate([[20, 14, 9, 17], [11, 20], [5, 20, 13], [18]])]
    runs += [left_padded([n], 100 + n) for n in (17, 45, 66, 101, 120)]
    for ids, mask in runs:
        out = skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=4)
        expected = skh.generate(eager, eager_cache, ids, attention_mask=mask, max_new_tokens=4)
        assert torch.equal(out, expected), ids.shape


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_the_seeds_compile_one_graph_per_bucket_as_unquantized(kv_dtype, fresh_dynamo):
    model = tiny_model("qwen2")  # full and sliding layers
    args = dict(max_batch_size=4, max_cache_len=160, max_chunk=128, batch_buckets=[1, 2, 4],
                prompt_buckets=[32, 64, 96, 128], kv_dtype=kv_dtype)
    recorder = GraphRecorder()
    cache = skh.StaticKVCache(model.config, **args)
    pointers = [[b.data_ptr() for b in layer.buffers()] for layer in cache.layers]
    seeds(compiled(model, recorder), cache, skh.StaticKVCache(model.config, **args))
    assert sorted(recorder.decode()) == [(1, 1), (2, 1), (4, 1)]
    assert sorted(recorder.prefill()) == [(4, 32), (4, 64), (4, 96), (4, 128)]
    assert not torch._dynamo.utils.counters["graph_break"]
    assert pointers == [[b.data_ptr() for b in layer.buffers()] for layer in cache.layers]


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_inductor_quantizes_into_the_cache_in_place(kv_dtype, fresh_dynamo):
    model = tiny_model("llama")
    ids, mask = left_padded([10, 6])
    args = dict(max_batch_size=2, max_cache_len=64, batch_buckets=[2], prompt_buckets=[16],
                kv_dtype=kv_dtype)
    expected = skh.generate(model, skh.StaticKVCache(model.config, **args), ids,
                            attention_mask=mask, max_new_tokens=1)
    cache = skh.StaticKVCache(model.config, **args)
    compiled(model, "inductor")
    out, codes = run_and_get_code(
        lambda: skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=1))
    assert torch.equal(out, expected) and len(codes) == 1
    writes = re.findall(r"torch\.ops\.statickv\.cache_write_quantized\.default\("
                        r"(arg\d+_1), (arg\d+_1), (arg\d+_1), (arg\d+_1),", codes[0])
    assert len(writes) == len(cache.layers)  # one op per layer, on the graph's own inputs
    for buffers in writes:
        for name in buffers:
            assert f"{name}.copy_(" not in codes[0]


# -- CUDA (benchmarks/gpu/run_gpu.sh, stage hf_quantized) ---------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_cuda_the_operator_stores_what_it_stores_on_the_cpu(kv_dtype):
    gen = torch.Generator().manual_seed(1)
    key, value = (torch.randn(2, 2, 5, 8, generator=gen) * 4 for _ in range(2))
    stored = []
    for device in ("cpu", "cuda"):
        cache, _ = native_twins(kv_dtype, torch.float32)
        if device == "cuda":
            config = cache.config
            config.device = torch.device("cuda")
            cache = statickv.StaticCache(config)
        plan = cache.prepare(torch.arange(5, device=device), 2)
        torch.ops.statickv.cache_write_quantized(cache.keys(0), cache.values(0),
                                                 cache.key_scales(0), cache.value_scales(0),
                                                 key.to(device), value.to(device),
                                                 plan.write_slots(0))
        stored.append([t.view(torch.uint8).cpu() for t in (cache.keys(0), cache.values(0),
                                                            cache.key_scales(0),
                                                            cache.value_scales(0))])
    for cpu, gpu in zip(*stored):
        assert torch.equal(cpu, gpu)


@cuda
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_cuda_graphs_replay_the_quantized_cache_as_eager(kv_dtype, fresh_dynamo):
    model = tiny_model("qwen2").cuda()
    ids, mask = (t.cuda() for t in left_padded([20, 9]))
    expected = reference(model, kv_dtype, ids, mask, 8)
    args = dict(max_batch_size=2, max_cache_len=64, max_chunk=32, device="cuda",
                batch_buckets=[2], prompt_buckets=[32], kv_dtype=kv_dtype)
    eager = skh.generate(model, skh.StaticKVCache(model.config, **args), ids,
                         attention_mask=mask, max_new_tokens=8)
    assert torch.equal(eager, expected)
    model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True,
                                  dynamic=False)
    cache = skh.StaticKVCache(model.config, **args)
    for _ in range(3):  # capture, then replays
        out = skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=8)
        assert torch.equal(out, eager)
    assert not torch._dynamo.utils.counters["graph_break"]
