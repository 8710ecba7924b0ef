"""The two seed problems, where transformers users raised them, solved with
a forward compiled by the user (dynamic=False, fullgraph=True):

- transformers PR 37394 / issue 42454: one static cache instance cannot serve
  a smaller batch; here one instance serves batch 4, 2, 3, 1 with batch
  buckets {1, 2, 4} and at most 3 decode graphs;
- transformers issue 29151: every new prompt length recompiles; here 16
  prompts of distinct lengths in 17..120 compile at most 4 prefill graphs.

Graphs are counted with a recording aot_eager backend (dynamo's counters do
not depend on the backend); one Inductor compile checks that the generated
code writes the cache in place (no copy of the cache)."""

import ast
import re

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import statickv.hf as skh
from conftest import GraphRecorder, left_padded, tiny_model

LENGTH_BUCKETS = [32, 64, 96, 128]
PROMPT_LENGTHS = [17 + 7 * i for i in range(15)] + [120]  # 16 distinct, 17..120


def compiled(model, backend):
    model.forward = torch.compile(model.forward, backend=backend, dynamic=False, fullgraph=True)
    return model


def seed_37394(model, cache, eager):
    """batch 4, then 2, 3, 1 (ragged, left-padded) on one instance."""
    for seed, lengths in enumerate([[20, 14, 9, 17], [11, 20], [5, 20, 13], [18]]):
        ids, mask = left_padded(lengths, seed)
        out = skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=6)
        assert torch.equal(out, eager(ids, mask, 6)), f"batch {len(lengths)}"


def seed_29151(model, cache, eager):
    for seed, n in enumerate(PROMPT_LENGTHS):
        ids, mask = left_padded([n], 100 + seed)
        out = skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=3)
        assert torch.equal(out, eager(ids, mask, 3)), f"prompt length {n}"


def setup(kind="llama", prompt_buckets=LENGTH_BUCKETS):
    model = tiny_model(kind)

    def eager(ids, mask, new):
        return reference.generate(ids, attention_mask=mask, max_new_tokens=new)

    reference = tiny_model(kind)  # the same weights, never compiled
    cache = skh.StaticKVCache(model.config, max_batch_size=4, max_cache_len=160, max_chunk=128,
                              batch_buckets=[1, 2, 4], prompt_buckets=prompt_buckets)
    return model, cache, eager


def test_one_instance_serves_both_seeds_with_3_decode_and_4_prefill_graphs(fresh_dynamo):
    """Batch 4, 2, 3, 1, then 16 prompt lengths, on one instance of a model
    with full and sliding layers (two masks a step), at dynamo's default
    recompile limit; the cache's buffers never move."""
    assert torch._dynamo.config.recompile_limit == 8  # dynamo's default, not raised here
    model, cache, eager = setup("qwen2")
    recorder = GraphRecorder()
    pointers = [layer.keys.data_ptr() for layer in cache.layers]
    compiled(model, recorder)
    seed_37394(model, cache, eager)
    assert sorted(recorder.decode()) == [(1, 1), (2, 1), (4, 1)]
    assert recorder.prefill() == [(4, 32)]  # prefill runs at the largest batch bucket
    seed_29151(model, cache, eager)
    assert sorted(recorder.decode()) == [(1, 1), (2, 1), (4, 1)]
    assert sorted(recorder.prefill()) == [(4, q) for q in LENGTH_BUCKETS]
    assert len(recorder.shapes) <= torch._dynamo.config.recompile_limit
    assert pointers == [layer.keys.data_ptr() for layer in cache.layers]
    assert not torch._dynamo.utils.counters["graph_break"]


def test_one_prompt_bucket_prefills_every_length_in_chunks_through_one_graph(fresh_dynamo):
    model, cache, eager = setup(prompt_buckets=[32])
    recorder = GraphRecorder()
    seed_29151(compiled(model, recorder), cache, eager)  # 17..120 tokens: 1 to 4 chunks
    assert recorder.prefill() == [(4, 32)]
    assert recorder.decode() == [(1, 1)]
    assert not torch._dynamo.utils.counters["graph_break"]


def input_sizes(code):
    """The size Inductor's generated code asserts for each graph input:
    assert_size_stride(arg, size, stride) one by one (torch up to 2.14) or
    assert_size_stride_grouped((args...), (sizes...), (strides...)) (2.15)."""
    sizes = {}
    for line in code.splitlines():
        line = line.strip()
        call = re.match(r"assert_size_stride(_grouped)?\((.*)\)$", line)
        if not call:
            continue
        try:  # a graph input's assertion holds literals and argN_1 names only
            fields = ast.literal_eval("(" + re.sub(r"\b(arg\d+_1)\b", r'"\1"', call.group(2)) + ",)")
        except (ValueError, SyntaxError):
            continue
        if call.group(1):
            sizes.update(zip(fields[0], fields[1]))
        else:
            sizes[fields[0]] = fields[1]
    return sizes


def test_inductor_writes_the_cache_in_place(fresh_dynamo):
    model = tiny_model("llama")
    ids, mask = left_padded([10, 6])
    expected = model.generate(ids, attention_mask=mask, max_new_tokens=1)
    cache = skh.StaticKVCache(model.config, max_batch_size=2, max_cache_len=64,
                              batch_buckets=[2], prompt_buckets=[16])
    compiled(model, "inductor")
    out, codes = run_and_get_code(
        lambda: skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=1))
    assert torch.equal(out, expected) and len(codes) == 1
    code = codes[0]
    buffer = (2, 2, 65, 8)  # [max_batch, kv_heads, max_len + scratch, head_dim]
    writes = re.findall(r"torch\.ops\.statickv\.cache_write\.default\((arg\d+_1), (arg\d+_1),",
                        code)
    assert len(writes) == len(cache.layers)  # one op per layer, on the graph's own inputs
    assert f"empty_strided_cpu({buffer}" not in code  # no new cache-sized buffer
    sizes = input_sizes(code)
    for keys, values in writes:
        assert f"{keys}.copy_(" not in code and f"{values}.copy_(" not in code
        assert sizes[keys] == sizes[values] == buffer
