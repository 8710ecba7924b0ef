"""What transformers' generate asks of a cache beyond one greedy pass, through
plain model.generate with a StaticKVCache, each against transformers' own
DynamicCache with the same tokens: crop (by 0, -1 and -k, and its
refusals), beam search (reorder_cache), copy.deepcopy and the prompt-reuse
recipe, assisted and prompt-lookup decoding, and prompts longer than the
sliding window and max_chunk on Mistral, Qwen2, Gemma 2 and Gemma 3."""

import copy
import re

import pytest
import torch

import statickv.hf as skh
from conftest import WINDOW, any_model, assert_same, left_padded, repeating, snapshot, tiny_model


def make_cache(model, max_chunk=16, max_batch_size=4, max_cache_len=96):
    return skh.StaticKVCache(model.config, max_batch_size=max_batch_size,
                             max_cache_len=max_cache_len, max_chunk=max_chunk)


def greedy(model, ids, mask, new, **kwargs):
    return model.generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False,
                          **kwargs)


# -- crop ---------------------------------------------------------------------


def prefilled(kind, length):
    model = any_model(kind)
    cache = make_cache(model)
    ids, mask = left_padded([length])
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, cache=cache, use_cache=True)
    return model, cache, ids


@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_crop_zero_changes_nothing(kind):
    _, cache, _ = prefilled(kind, 12)
    before = snapshot(cache)
    cache.crop(0)
    assert_same(before, snapshot(cache))
    assert cache.is_croppable


@pytest.mark.parametrize("kind", ["llama", "mistral", "gemma3"])
@pytest.mark.parametrize("k", [1, 3])
def test_crop_then_decode_equals_never_having_fed_the_cropped_tokens(kind, k):
    # Feed 12 tokens, crop k, continue: the logits equal a cache that was
    # fed only 12 - k tokens.
    model, cache, ids = prefilled(kind, 12)
    cache.crop(-k)
    assert cache.get_seq_length() == 12 - k
    # The C++ rollback took the positions back: no slot holds one of them.
    assert int(cache.native.seq_lengths()[0]) == 12 - k
    for layer in range(cache.native.num_layers):
        assert int(cache.native.slot_positions(layer)[0].max()) == 12 - k - 1
    reference = make_cache(model)
    with torch.no_grad():
        model(input_ids=ids[:, :12 - k], cache=reference, use_cache=True)
        nxt = ids[:, 12 - k:12 - k + 1]
        pos = torch.tensor([[12 - k]])
        ours = model(input_ids=nxt, position_ids=pos, cache=cache, use_cache=True)
        theirs = model(input_ids=nxt, position_ids=pos, cache=reference,
                       use_cache=True)
    assert torch.allclose(ours.logits, theirs.logits, atol=1e-5)


def test_crop_refuses_positive_and_too_deep_values_before_anything_changes():
    _, cache, _ = prefilled("mistral", 12)
    before = snapshot(cache)
    with pytest.raises(ValueError, match="tokens_to_remove: expected 0 or a negative"):
        cache.crop(3)
    with pytest.raises(ValueError, match="at most the 12 positions"):
        cache.crop(-13)
    assert_same(before, snapshot(cache))
    # A ring of capacity window + max_chunk - 1 = 23 that wrapped takes back
    # at most max_chunk positions past the newest ever written.
    model = tiny_model("mistral")
    cache = make_cache(model, max_chunk=4)
    ids, _ = left_padded([40])
    with torch.no_grad():
        for start in range(0, 40, 4):
            model(input_ids=ids[:, start:start + 4], cache=cache, use_cache=True,
                  position_ids=torch.arange(start, start + 4).unsqueeze(0))
    before = snapshot(cache)
    with pytest.raises(ValueError, match="max_chunk=4"):
        cache.crop(-12)
    assert_same(before, snapshot(cache))


# -- beam search --------------------------------------------------------------


@pytest.mark.parametrize("beams", [2, 4])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_beam_search_equals_dynamic_cache_beams_and_scores(kind, beams):
    model = tiny_model(kind)
    ids, mask = left_padded([9, 5])
    kwargs = dict(num_beams=beams, do_sample=False, max_new_tokens=10, output_scores=True,
                  return_dict_in_generate=True, early_stopping=True)
    expected = model.generate(ids, attention_mask=mask, **kwargs)
    cache = make_cache(model, max_batch_size=2 * beams)
    ours = model.generate(ids, attention_mask=mask, cache=cache, **kwargs)
    assert torch.equal(ours.sequences, expected.sequences)
    assert torch.allclose(ours.sequences_scores, expected.sequences_scores, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16])
def test_reorder_cache_takes_any_integer_index_dtype(dtype):
    model, cache, _ = prefilled("llama", 6)
    rows = cache.native.keys(0)[:2].clone()
    cache.reorder_cache(torch.tensor([1, 0], dtype=dtype))
    assert torch.equal(cache.native.keys(0)[0], rows[1])
    with pytest.raises(ValueError, match="beam_idx: expected an integer dtype"):
        cache.reorder_cache(torch.tensor([0.0, 1.0]))


# -- deepcopy -----------------------------------------------------------------


def test_deepcopy_is_independent_and_copy_is_shallow():
    _, cache, _ = prefilled("qwen2", 10)
    clone = copy.deepcopy(cache)
    for a, b in zip(cache.layers, clone.layers):
        assert a.keys.data_ptr() != b.keys.data_ptr()
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    assert_same(snapshot(cache), snapshot(clone))
    before = snapshot(clone)
    cache.reset()
    assert_same(before, snapshot(clone))
    shallow = copy.copy(clone)
    assert shallow.native is clone.native and shallow.layers[0].keys is clone.layers[0].keys


@pytest.mark.parametrize("kind", ["llama", "mistral", "gemma2"])
def test_a_prefilled_prefix_reused_through_deepcopy_equals_generating_without_reuse(kind):
    model = any_model(kind)
    prefix, _ = left_padded([14], seed=1)
    prefix_cache = make_cache(model)
    with torch.no_grad():
        model(input_ids=prefix, cache=prefix_cache, use_cache=True)
    for seed in (2, 3):
        suffix, _ = left_padded([5], seed=seed)
        prompt = torch.cat([prefix, suffix], 1)
        expected = greedy(model, prompt, None, 8)
        ours = greedy(model, prompt, None, 8, cache=copy.deepcopy(prefix_cache))
        assert torch.equal(ours, expected)
    assert prefix_cache.get_seq_length() == 14


# -- assisted and prompt-lookup decoding ---------------------------------------


@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_prompt_lookup_decoding_gives_greedy_tokens(kind):
    model = any_model(kind)
    ids, mask = left_padded([20])
    ids = torch.cat([ids, ids[:, 4:12]], 1)  # a repeat for the lookup to find
    mask = torch.ones_like(ids)
    expected = greedy(model, ids, mask, 16)
    cache = make_cache(model)
    ours = greedy(model, ids, mask, 16, cache=cache, prompt_lookup_num_tokens=4)
    assert torch.equal(ours, expected)


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_assisted_decoding_gives_greedy_tokens(kind):
    model = any_model(kind)
    assistant = tiny_model(kind, seed=7)
    ids, mask = left_padded([10])
    expected = greedy(model, ids, mask, 14)
    cache = make_cache(model)
    ours = greedy(model, ids, mask, 14, cache=cache, assistant_model=assistant,
                  num_assistant_tokens=5, num_assistant_tokens_schedule="constant")
    assert torch.equal(ours, expected)


def test_the_cache_keeps_its_own_sizes_through_every_generate_mode():
    # transformers' generate reads and records cache sizes of its own (5.25
    # added past recording with keyword arguments): none may overwrite ours.
    model = any_model("qwen2")
    cache = make_cache(model, max_batch_size=4, max_cache_len=96)
    ids, mask = left_padded([10, 7])
    assistant = tiny_model("qwen2", seed=3)
    modes = [(2, dict()), (2, dict(num_beams=2)), (1, dict(prompt_lookup_num_tokens=3)),
             (1, dict(assistant_model=assistant, num_assistant_tokens=3,
                      num_assistant_tokens_schedule="constant"))]
    for rows, kwargs in modes:
        cache.reset()
        greedy(model, ids[:rows], mask[:rows], 6, cache=cache, **kwargs)
        assert (cache.max_batch_size, cache.max_cache_len) == (4, 96), kwargs
        assert (cache.native.config.max_batch, cache.native.config.max_len) == (4, 96)


# -- long prompts on sliding models ---------------------------------------------


@pytest.mark.parametrize("kind", ["mistral", "qwen2", "gemma2", "gemma3"])
@pytest.mark.parametrize("length", [3 * WINDOW + 1, 40])
def test_prompts_longer_than_the_window_and_max_chunk_give_transformers_tokens(kind, length):
    model = any_model(kind)
    ids, mask = left_padded([length])
    expected = greedy(model, ids, mask, 12)
    cache = make_cache(model, max_chunk=WINDOW)
    assert length > cache.max_chunk and length > WINDOW
    ours = greedy(model, ids, mask, 12, cache=cache)
    assert torch.equal(ours, expected)
    # And the ring kept what a chunked prefill keeps: decoding on equals
    # statickv's own loop over the same cache geometry.
    again = skh.generate(model, make_cache(model, max_chunk=WINDOW), ids, attention_mask=mask,
                         max_new_tokens=12)
    assert torch.equal(again, expected)


@pytest.mark.parametrize("kind", ["mistral", "gemma3"])
def test_a_long_step_after_a_cached_prefix_sees_the_prefix_window(kind):
    # A 14-token step (> max_chunk = 8) after 30 cached tokens: every query
    # sees the window before it, from the ring, as one full forward does.
    model = any_model(kind)
    ids, _ = left_padded([44])
    cache = make_cache(model, max_chunk=WINDOW)
    with torch.no_grad():
        full = model(input_ids=ids).logits
        model(input_ids=ids[:, :30], cache=cache, use_cache=True)
        step = model(input_ids=ids[:, 30:], cache=cache, use_cache=True,
                     position_ids=torch.arange(30, 44).unsqueeze(0)).logits
    assert torch.allclose(step, full[:, 30:], atol=1e-5)
    expected = greedy(model, ids, None, 6)
    assert torch.equal(greedy(model, ids, None, 6, cache=cache), expected)


def test_a_step_past_max_cache_len_or_max_batch_is_refused_before_anything_is_written():
    model = tiny_model("llama")
    cache = make_cache(model, max_cache_len=32)
    ids, _ = left_padded([30])
    with torch.no_grad():
        model(input_ids=ids, cache=cache, use_cache=True)
        before = snapshot(cache)
        with pytest.raises(ValueError, match="max_cache_len"):
            model(input_ids=ids[:, :4], cache=cache, use_cache=True)
        assert_same(before, snapshot(cache))
        wide, _ = left_padded([2] * 5)
        with pytest.raises(ValueError, match="max_batch_size=4"):
            model(input_ids=wide, cache=make_cache(model), use_cache=True)


# -- statickv.hf.generate: prompt lookup and assisted decoding -----------------


class PrepareSpy:
    """Stands for a cache's C++ cache and checks, at every step it plans,
    that each row it feeds holds exactly the positions before the row's
    first one: rejected drafts were rolled back."""

    def __init__(self, native):
        self.native = native
        self.steps = 0

    def __getattr__(self, name):
        return getattr(self.native, name)

    def prepare(self, positions, live_batch, attend_len=-1):
        lengths = self.native.seq_lengths()
        for row in range(live_batch):
            fed = positions[row][positions[row] >= 0]
            if len(fed):
                assert int(lengths[row]) == int(fed[0]), (row, positions[row], lengths[row])
        self.steps += 1
        return self.native.prepare(positions, live_batch, attend_len)


@pytest.mark.parametrize("kind", ["llama", "mistral", "gemma3"])
def test_statickv_generate_with_prompt_lookup_gives_each_rows_greedy_tokens(kind):
    model = any_model(kind)
    ids, mask = repeating([24, 11, 17])
    cache = make_cache(model)
    cache.native = spy = PrepareSpy(cache.native)
    ours = skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=14,
                        prompt_lookup_num_tokens=6)
    plain = skh.generate(model, make_cache(model), ids, attention_mask=mask, max_new_tokens=14)
    assert torch.equal(ours, plain)
    for row in range(ids.shape[0]):  # each row alone
        n = int(mask[row].sum())
        alone = greedy(model, ids[row:row + 1, -n:], None, 14)
        assert ours[row, ids.shape[1]:].tolist() == alone[0, n:].tolist()
        # Rejected drafts were rolled back: the row holds its prompt and every
        # new token but the last (not fed), and no slot holds a later position.
        assert int(cache.native.seq_lengths()[row]) == n + 14 - 1
        for layer in range(cache.native.num_layers):
            assert int(cache.native.slot_positions(layer)[row].max()) == n + 14 - 2
    assert spy.steps > 2  # prefill, then verification steps


def test_statickv_generate_with_an_assistant_gives_greedy_tokens():
    model = tiny_model("qwen2")
    ids, mask = repeating([18])
    expected = greedy(model, ids, mask, 15)
    ours = skh.generate(model, make_cache(model), ids, attention_mask=mask, max_new_tokens=15,
                        assistant_model=tiny_model("qwen2", seed=5), num_assistant_tokens=4)
    assert torch.equal(ours, expected)
    # The target as its own assistant: every draft is accepted.
    ours = skh.generate(model, make_cache(model), ids, attention_mask=mask, max_new_tokens=15,
                        assistant_model=model, num_assistant_tokens=4)
    assert torch.equal(ours, expected)


def test_statickv_generate_verification_compiles_one_graph_per_verify_bucket(fresh_dynamo):
    from conftest import GraphRecorder

    model = tiny_model("llama")
    recorder = GraphRecorder()
    model.forward = torch.compile(model.forward, backend=recorder, dynamic=False,
                                  fullgraph=True)
    cache = make_cache(model)
    for seed in range(3):
        ids, mask = repeating([20, 9], seed=seed)
        skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=10,
                     prompt_lookup_num_tokens=6)
    verify = {s for s in recorder.shapes if s[1] > 1 and s[1] < 16}
    assert verify <= {(2, q) for q in cache.verify_buckets.sizes()}
    assert len(recorder.shapes) == len(set(recorder.shapes))  # no shape compiled twice


def test_statickv_generate_refuses_speculation_it_cannot_verify_before_writing():
    model = tiny_model("llama")
    cache = make_cache(model, max_chunk=8)
    before = snapshot(cache)
    ids, mask = left_padded([10, 6])
    cases = [
        (dict(prompt_lookup_num_tokens=8), "prompt_lookup_num_tokens: expected"),
        (dict(prompt_lookup_num_tokens=4, do_sample=True), "do_sample: expected False"),
        (dict(assistant_model=model), "num_assistant_tokens: expected num_assistant_tokens + 1 = 21"),
        (dict(assistant_model=model, num_assistant_tokens=3), "a batch of 1 with assistant_model"),
        (dict(prompt_lookup_num_tokens=0), "prompt_lookup_num_tokens: expected an integer"),
        (dict(prompt_lookup_num_tokens=2, assistant_model=model), "not both"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=4, **kwargs)
        assert_same(before, snapshot(cache))


# -- statickv.hf.generate: beam search ----------------------------------------------


@pytest.mark.parametrize("beams", [2, 4])
@pytest.mark.parametrize("kind", ["llama", "mistral", "gemma3"])
@pytest.mark.parametrize("early_stopping", [False, True])
def test_statickv_generate_beam_search_equals_transformers_beams(kind, beams, early_stopping):
    model = any_model(kind)
    ids, mask = left_padded([9, 5])
    expected = model.generate(ids, attention_mask=mask, num_beams=beams, do_sample=False,
                              max_new_tokens=10, early_stopping=early_stopping)
    cache = make_cache(model, max_batch_size=2 * beams)
    pointers = [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in cache.layers]
    ours = skh.generate(model, cache, ids, attention_mask=mask, num_beams=beams,
                        max_new_tokens=10, early_stopping=early_stopping)
    assert torch.equal(ours, expected)
    assert pointers == [(layer.keys.data_ptr(), layer.values.data_ptr())
                        for layer in cache.layers]


def test_statickv_generate_beam_reorder_reuses_one_scratch_call_after_call():
    model = tiny_model("qwen2")
    cache = make_cache(model, max_batch_size=8)
    ids, mask = left_padded([7, 12])
    skh.generate(model, cache, ids, attention_mask=mask, num_beams=4, max_new_tokens=6)
    buffers, index = cache._beam_scratch
    held = [t.data_ptr() for t in buffers.values()] + [index.data_ptr()]
    assert len(buffers) == 2  # one per layer shape: the full layers', the rings'
    skh.generate(model, cache, ids, attention_mask=mask, num_beams=4, max_new_tokens=6)
    buffers, index = cache._beam_scratch
    assert held == [t.data_ptr() for t in buffers.values()] + [index.data_ptr()]


def test_statickv_generate_refuses_beam_options_it_cannot_honour_before_writing():
    model = tiny_model("llama")
    cache = make_cache(model)
    before = snapshot(cache)
    ids, mask = left_padded([6, 4])
    cases = [
        (dict(num_beams=4), "batch * num_beams <= max_batch_size=4"),
        (dict(num_beams=2, do_sample=True), "do_sample: expected False with num_beams"),
        (dict(num_beams=2, num_return_sequences=2), "num_return_sequences: expected 1"),
        (dict(num_beams=2, prompt_lookup_num_tokens=3), "num_beams: expected 1 with"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=4, **kwargs)
        assert_same(before, snapshot(cache))
