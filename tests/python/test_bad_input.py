"""Bad input raises a Python exception carrying statickv's message (naming
the argument, the expected and the actual value) before anything is
written: every buffer and all bookkeeping equal a snapshot taken before
(Invariant [checked before written], docs/design.md)."""

import pytest
import torch
import transformers

import statickv.hf as skh
from conftest import COMMON, assert_same, left_padded, snapshot, tiny_model


@pytest.fixture
def used_cache():
    """A Qwen2 model and a cache that already holds a generation."""
    model = tiny_model("qwen2")
    cache = skh.StaticKVCache(model.config, max_batch_size=2, max_cache_len=32, max_chunk=16)
    ids, mask = left_padded([9, 5])
    skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=4)
    return model, cache


def test_a_batch_over_max_batch_size(used_cache):
    model, cache = used_cache
    before = snapshot(cache)
    ids, mask = left_padded([4, 4, 4])
    with pytest.raises(ValueError, match=r"input_ids: expected a batch <= max_batch_size=2 "
                                         r"but got 3"):
        skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=2)
    assert_same(before, snapshot(cache))


def test_prompt_plus_new_tokens_over_max_cache_len(used_cache):
    model, cache = used_cache
    before = snapshot(cache)
    ids, mask = left_padded([20, 3])
    with pytest.raises(ValueError, match=r"max_new_tokens: expected prompt length \+ "
                                         r"max_new_tokens <= max_cache_len=32 but got "
                                         r"20 \+ 13 = 33"):
        skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=13)
    assert_same(before, snapshot(cache))


def test_right_padding_and_unknown_arguments(used_cache):
    model, cache = used_cache
    before = snapshot(cache)
    ids, mask = left_padded([6, 3])
    with pytest.raises(ValueError, match="attention_mask: expected left padding"):
        skh.generate(model, cache, ids, attention_mask=mask.flip(1), max_new_tokens=2)
    with pytest.raises(ValueError, match=r"generate_kwargs: expected only .* but got "
                                         r"\['num_beam_groups'\]"):
        skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=2,
                     num_beam_groups=2)
    assert_same(before, snapshot(cache))


def test_a_layer_type_the_config_does_not_allow():
    config = transformers.Qwen2Config(layer_types=["full_attention", "chunked_attention"] * 2,
                                      **COMMON)
    with pytest.raises(ValueError, match=r"config.layer_types\[1\]: expected 'full_attention' "
                                         r"or 'sliding_attention' but got 'chunked_attention'"):
        skh.StaticKVCache(config, max_batch_size=2, max_cache_len=32)


def test_the_cpp_cache_refuses_bad_steps_unchanged(used_cache):
    # The C++ checks, through the bindings: c10::Error becomes RuntimeError
    # with statickv's message, and the cache is as it was.
    _, cache = used_cache
    before = snapshot(cache)
    with pytest.raises(RuntimeError, match=r"cache_position\[0, 1\]: expected a position < "
                                           r"max_len=32 but got 40"):
        cache.native.prepare(torch.tensor([[3, 40]]), 1)
    with pytest.raises(RuntimeError, match=r"live_batch: expected a value in \[1, "
                                           r"max_batch=2\] but got 3"):
        cache.begin_step(torch.zeros(3, 1, dtype=torch.long), 3)
    with pytest.raises(RuntimeError, match=r"indices\[1\]: expected a row in \[0, "
                                           r"max_batch=2\) but got 7"):
        cache.reorder_cache(torch.tensor([0, 7]))
    assert_same(before, snapshot(cache))


def test_a_cache_too_small_for_its_buckets():
    model = tiny_model("llama")
    with pytest.raises(ValueError, match=r"batch_buckets: expected sizes <= max_batch_size=2 "
                                         r"but got \[1, 4\]"):
        skh.StaticKVCache(model.config, max_batch_size=2, max_cache_len=32, batch_buckets=[1, 4])
