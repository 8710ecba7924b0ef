"""StaticKVCache through plain model.generate and through
statickv.hf.generate gives transformers' own eager results (its default
DynamicCache), for Llama, Mistral and Qwen2, batch 1 and ragged left-padded
batches, with one cache instance reused call after call on the same buffers."""

import pytest
import torch

import statickv.hf as skh
from conftest import WINDOW, left_padded, tiny_model

KINDS = ["llama", "mistral", "qwen2"]
BATCHES = {"batch 1": [11], "ragged": [13, 6, 9]}


def reference(model, ids, mask, new, **kwargs):
    return model.generate(ids, attention_mask=mask, max_new_tokens=new, **kwargs)


def make_cache(model, **kwargs):
    return skh.StaticKVCache(model.config, max_batch_size=4, max_cache_len=64, max_chunk=16,
                             **kwargs)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lengths", BATCHES.values(), ids=BATCHES.keys())
def test_greedy_ids_equal_transformers_eager(kind, lengths):
    model = tiny_model(kind)
    ids, mask = left_padded(lengths)
    expected = reference(model, ids, mask, 12, do_sample=False)
    cache = make_cache(model)
    pointers = [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in cache.layers]
    plain = model.generate(ids, attention_mask=mask, past_key_values=cache, max_new_tokens=12,
                           do_sample=False)
    ours = skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=12,
                        do_sample=False)
    assert torch.equal(plain, expected)
    assert torch.equal(ours, expected)
    assert pointers == [(layer.keys.data_ptr(), layer.values.data_ptr())
                        for layer in cache.layers]


@pytest.mark.parametrize("kind", ["mistral", "qwen2"])
def test_a_ring_that_wraps_keeps_equal_ids(kind):
    # prompt + new tokens = 15 + 30 > 2 * window: every sliding row wraps
    # its ring (capacity window + max_chunk - 1 = 23) at least once.
    model = tiny_model(kind)
    ids, mask = left_padded([15, 4])
    expected = reference(model, ids, mask, 30, do_sample=False)
    cache = make_cache(model)
    assert cache.native.capacity(len(cache.layers) - 1) == WINDOW + 16 - 1 < 45
    assert torch.equal(skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=30),
                       expected)
    cache.reset()
    plain = model.generate(ids, attention_mask=mask, cache=cache, max_new_tokens=30)
    assert torch.equal(plain, expected)


def test_one_instance_serves_every_batch_size_call_after_call():
    # transformers' StaticCache allocates for its first call's batch; this
    # one serves 4, 2, 3, 1 rows on the buffers it allocated once.
    model = tiny_model("llama")
    cache = make_cache(model)
    pointers = [layer.keys.data_ptr() for layer in cache.layers]
    for seed, lengths in enumerate([[9, 9, 5, 7], [12, 3], [4, 10, 8], [14]]):
        ids, mask = left_padded(lengths, seed)
        expected = reference(model, ids, mask, 8)
        cache.reset()
        assert torch.equal(model.generate(ids, attention_mask=mask, cache=cache,
                                          max_new_tokens=8), expected)
        assert torch.equal(skh.generate(model, cache, ids, attention_mask=mask,
                                        max_new_tokens=8), expected)
    assert pointers == [layer.keys.data_ptr() for layer in cache.layers]


def test_a_prompt_longer_than_the_largest_bucket_is_prefilled_in_chunks():
    model = tiny_model("qwen2")
    ids, mask = left_padded([37, 20])  # three chunks of <= 16 tokens
    expected = reference(model, ids, mask, 6)
    cache = make_cache(model)
    assert torch.equal(skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=6),
                       expected)


def test_sampling_draws_what_generate_draws_from_the_same_seed():
    model = tiny_model("llama")
    ids, mask = left_padded([10, 7])
    kwargs = dict(do_sample=True, temperature=0.8, top_k=20, top_p=0.9, max_new_tokens=10)
    torch.manual_seed(7)
    expected = model.generate(ids, attention_mask=mask, **kwargs)
    cache = make_cache(model)
    torch.manual_seed(7)
    assert torch.equal(skh.generate(model, cache, ids, attention_mask=mask, **kwargs), expected)


def test_rows_stop_at_eos_as_in_generate():
    model = tiny_model("llama")
    ids, mask = left_padded([10, 7, 12])
    free = reference(model, ids, mask, 10)
    eos = int(free[0, 12 + 3])  # row 0's fourth new token
    expected = reference(model, ids, mask, 10, eos_token_id=eos)
    cache = make_cache(model)
    ours = skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=10,
                        eos_token_id=eos)
    assert torch.equal(ours, expected)
