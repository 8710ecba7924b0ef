"""Shared pieces of the Python tests: tiny random transformers models built
from a config (fp32, never downloaded), left-padded batches, and a dynamo
backend that records every graph it is given."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

VOCAB = 97
WINDOW = 8  # Mistral's and Qwen2's sliding window: shorter than the prompts
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
              pad_token_id=0, eos_token_id=None, bos_token_id=None)


def tiny_model(kind, seed=0):
    """A tiny random Llama, Mistral (every layer sliding) or Qwen2 (full,
    full, sliding, sliding) in eval mode."""
    torch.manual_seed(seed)
    if kind == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**COMMON))
    elif kind == "mistral":
        model = transformers.MistralForCausalLM(
            transformers.MistralConfig(sliding_window=WINDOW, **COMMON))
    elif kind == "qwen2":
        types = ["full_attention"] * 2 + ["sliding_attention"] * 2
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
            use_sliding_window=True, sliding_window=WINDOW, max_window_layers=2,
            layer_types=types, **COMMON))
    else:
        raise ValueError(kind)
    model.generation_config.pad_token_id = 0
    return model.eval()


def tiny_gemma(kind, seed=0):
    """A tiny random Gemma 2 (alternating sliding, full) or Gemma 3 text
    model (five sliding layers then a full one), window WINDOW."""
    torch.manual_seed(seed)
    fields = dict(COMMON, head_dim=8, sliding_window=WINDOW)
    if kind == "gemma2":
        fields["num_hidden_layers"] = 4
        model = transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**fields))
    else:
        fields["num_hidden_layers"] = 6
        model = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**fields))
    model.generation_config.pad_token_id = 0
    return model.eval()


def any_model(kind):
    return tiny_gemma(kind) if kind.startswith("gemma") else tiny_model(kind)


def left_padded(lengths, seed=0):
    """input_ids and attention_mask for prompts of these lengths, padded on
    the left with token 0, as transformers pads for generation."""
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, width - n:] = torch.randint(3, VOCAB, (n,), generator=gen)
        mask[row, width - n:] = 1
    return ids, mask


def repeating(lengths, seed=0):
    """Left-padded prompts whose second half repeats part of the first, so
    prompt lookup finds drafts."""
    ids, mask = left_padded(lengths, seed=seed)
    width = ids.shape[1]
    for row, n in enumerate(lengths):
        half = n // 2
        ids[row, width - half:] = ids[row, width - n:width - n + half]
    return ids, mask


class GraphRecorder:
    """A dynamo backend (aot_eager underneath) that records the input_ids
    shape of every graph it compiles: q == 1 is a decode graph."""

    def __init__(self):
        self.shapes = []

    def __call__(self, gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "placeholder" and "input_ids" in node.name:
                self.shapes.append(tuple(node.meta["example_value"].shape))
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    def decode(self):
        return [s for s in self.shapes if s[1] == 1]

    def prefill(self):
        return [s for s in self.shapes if s[1] > 1]


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


def snapshot(cache):
    """Every buffer and all bookkeeping of a StaticKVCache, copied."""
    native = cache.native
    state = [native.seq_lengths().clone()]
    for layer in range(native.num_layers):
        state += [native.keys(layer).clone(), native.values(layer).clone(),
                  native.slot_positions(layer).clone()]
    return state, (cache._seen, cache._managed)


def assert_same(before, after):
    tensors_before, host_before = before
    tensors_after, host_after = after
    assert host_before == host_after
    assert len(tensors_before) == len(tensors_after)
    for a, b in zip(tensors_before, tensors_after):
        assert torch.equal(a, b)
