#!/usr/bin/env python3
"""Writes the Hugging Face side of the cross-check (tests/reference/test_hf_crosscheck.cpp,
tests/reference/hf/check_demo.py).

usage: make_reference.py OUT_DIR

For each tiny random-weight model of MODELS (llama; llama with attention
biases; mistral with a sliding window on every layer; qwen2 with full then
sliding layers; qwen2 whose sliding_window is off; qwen2 on its class
defaults; qwen3; gemma2 with soft-capping; gemma3 with a rope per layer
type; phi3 with its projections fused on disk), seeded and fp32:

  OUT_DIR/<name>/config.json, model.safetensors   (save_pretrained)
  OUT_DIR/<name>/expected.safetensors  prompt_i int64 [len], generated_i int64 [8],
                                       logits_i float32 [8, vocab] (raw logits of
                                       each generated step); metadata
                                       {"cache": "static"|"dynamic"|"none", "num_prompts": "3"}
  OUT_DIR/<name>/prompts.txt           the prompts in statickv-demo's --prompt-ids syntax
  OUT_DIR/<name>/expected_ids.txt      one line per prompt: comma-separated generated ids

Each prompt is generated on its own (batch 1) with greedy decoding through
Hugging Face's StaticCache (falling back to the dynamic cache, recorded in the
metadata, when the static one cannot run the case; "none" for models whose
caches disagree with their own layers, see NO_CACHE_GREEDY). Every result is checked
here before it is written: the logits must match a plain no-cache forward over
the whole sequence, the greedy choices must be clear (no near-ties that a
float32 rounding difference could flip), and the generated tokens must vary.
Weights are random, nothing is downloaded. Takes a few seconds on a CPU.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (  # noqa: E402
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

VOCAB = 96
MAX_NEW_TOKENS = 8
PROMPT_LENGTHS = (7, 3, 11)  # different lengths; 7 and 11 exceed the sliding window
SLIDING_WINDOW = 5
FIRST_ID = 3  # prompt ids are drawn from [FIRST_ID, VOCAB)
# Greedy choices closer than this could flip between two correct float32
# implementations; the seeds below are chosen so that none is.
MIN_MARGIN = 1e-3

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=128,
    tie_word_embeddings=False,
    # Larger than the default 0.02, so that greedy decoding does not repeat one token.
    initializer_range=0.2,
    bos_token_id=None,
    eos_token_id=None,  # no EOS: every row runs the full MAX_NEW_TOKENS
    pad_token_id=None,
    attn_implementation="eager",
)

# Each entry: (class, config, seed, config.json edits after saving: field ->
# new value, or DROP to remove it).
# Configs carry fields their model type ignores (transformers 5.24), so the
# loader must ignore them too: Llama's layers ignore layer_types and
# sliding_window (its caches do not, so generate() with them fails or
# disagrees with the model's own forward: "llama-bias" is recorded with
# NO_CACHE_GREEDY, a greedy loop of full forward passes),
# Mistral ignores layer_types (it warns), Qwen2 ignores sliding_window unless
# use_sliding_window is true ("qwen2-nowindow" gets its sliding_window back
# in config.json, where transformers saved null). "qwen2-defaults" drops
# layer_types and max_window_layers from its config.json, so the loader must
# apply Qwen2's class default (max_window_layers 28: with 4 layers, none
# slides).
DROP = object()
MODELS = {
    "llama": (LlamaForCausalLM, LlamaConfig(num_hidden_layers=2, **COMMON), 1, {}),
    "llama-bias": (
        LlamaForCausalLM,
        LlamaConfig(
            num_hidden_layers=2,
            attention_bias=True,  # q, k, v and o biases
            layer_types=["sliding_attention", "full_attention"],
            sliding_window=SLIDING_WINDOW,
            **COMMON,
        ),
        4,
        {},
    ),
    "mistral": (
        MistralForCausalLM,
        MistralConfig(
            num_hidden_layers=2,
            sliding_window=SLIDING_WINDOW,
            layer_types=["full_attention", "full_attention"],
            **COMMON,
        ),
        2,
        {},
    ),
    "qwen2": (
        Qwen2ForCausalLM,
        Qwen2Config(
            num_hidden_layers=4,
            use_sliding_window=True,
            sliding_window=SLIDING_WINDOW,
            max_window_layers=2,
            **COMMON,
        ),
        3,
        {},
    ),
    "qwen2-nowindow": (
        Qwen2ForCausalLM,
        Qwen2Config(
            num_hidden_layers=4,
            use_sliding_window=False,
            sliding_window=SLIDING_WINDOW,
            max_window_layers=1,
            **COMMON,
        ),
        5,
        {"sliding_window": SLIDING_WINDOW},
    ),
    "qwen2-defaults": (
        Qwen2ForCausalLM,
        Qwen2Config(
            num_hidden_layers=4, use_sliding_window=True, sliding_window=SLIDING_WINDOW, **COMMON
        ),
        6,
        {"layer_types": DROP, "max_window_layers": DROP},
    ),
    # Qwen3: q/k norms, o_proj bias with attention_bias, full then sliding.
    "qwen3": (
        Qwen3ForCausalLM,
        Qwen3Config(
            num_hidden_layers=4,
            use_sliding_window=True,
            sliding_window=SLIDING_WINDOW,
            max_window_layers=2,
            attention_bias=True,
            **COMMON,
        ),
        7,
        {},
    ),
    # Gemma 2: alternating sliding and full (the class default, layer_types
    # dropped), a query_pre_attn_scalar other than head_dim, and soft-caps
    # small enough to bend these random logits.
    "gemma2": (
        Gemma2ForCausalLM,
        Gemma2Config(
            num_hidden_layers=4,
            sliding_window=SLIDING_WINDOW,
            query_pre_attn_scalar=24,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=6.0,
            **COMMON,
        ),
        8,
        {"layer_types": DROP},
    ),
    # Gemma 3: five sliding layers and a full one (the class default with
    # layer_types dropped), a rope per layer type (linear scaling on the full
    # layers), q/k norms in Gemma's (1 + weight) form. Untied: with random
    # weights a tied head repeats the input token (the real Gemma 3 270M
    # tests the tied head).
    "gemma3": (
        Gemma3ForCausalLM,
        Gemma3TextConfig(
            num_hidden_layers=6,
            sliding_window=SLIDING_WINDOW,
            rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 100000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1000.0},
            },
            **COMMON,
        ),
        9,
        {"layer_types": DROP},
    ),
    # Phi-3: Llama's layer with q/k/v and gate/up fused on disk, and a
    # sliding_window that slides every layer.
    "phi3": (
        Phi3ForCausalLM,
        Phi3Config(num_hidden_layers=2, sliding_window=SLIDING_WINDOW, **COMMON),
        12,
        {},
    ),
}
# Models whose expected tokens come from full no-cache forward passes.
NO_CACHE_GREEDY = {"llama-bias"}
# The layer types transformers must build for each model (checked below).
EXPECTED_SLIDING = {
    "llama": [False, False],
    "llama-bias": [False, False],
    "mistral": [True, True],
    "qwen2": [False, False, True, True],
    "qwen2-nowindow": [False] * 4,
    "qwen2-defaults": [False] * 4,
    "qwen3": [False, False, True, True],
    "gemma2": [True, False, True, False],
    "gemma3": [True] * 5 + [False],
    "phi3": [True, True],
}


def build(model_class, config, seed):
    torch.manual_seed(seed)
    model = model_class(config).to(torch.float32).eval()
    # Default initialisation leaves norm weights at 1 and biases at 0, which
    # would let a decoder that ignores them pass. Randomise both.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                # Gemma's norms scale by (1 + weight), the others by weight.
                base = 0.0 if model.config.model_type.startswith("gemma") else 1.0
                param.copy_(base + 0.2 * torch.randn_like(param))
            elif name.endswith(".bias"):
                param.copy_(0.2 * torch.randn_like(param))
    return model


def greedy(model, prompt, cache):
    generation_config = GenerationConfig(
        do_sample=False,
        max_new_tokens=MAX_NEW_TOKENS,
        min_new_tokens=MAX_NEW_TOKENS,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=0,
        output_logits=True,
        return_dict_in_generate=True,
        cache_implementation="static" if cache == "static" else None,
    )
    with torch.no_grad():
        out = model.generate(prompt.view(1, -1), generation_config=generation_config)
    generated = out.sequences[0, prompt.numel():].clone()
    logits = torch.stack([step[0] for step in out.logits]).to(torch.float32).contiguous()
    return generated, logits


def greedy_no_cache(model, prompt):
    """Greedy decoding by full forward passes: what the model itself computes."""
    sequence, logits = prompt.view(1, -1), []
    with torch.no_grad():
        for _ in range(MAX_NEW_TOKENS):
            step = model(sequence, use_cache=False).logits[0, -1].float()
            logits.append(step)
            sequence = torch.cat([sequence, step.argmax().view(1, 1)], dim=1)
    return sequence[0, prompt.numel():].clone(), torch.stack(logits).contiguous()


def check(name, model, prompt, generated, logits):
    """The HF result itself must be sound before anything is compared with it."""
    if generated.numel() != MAX_NEW_TOKENS or logits.shape != (MAX_NEW_TOKENS, VOCAB):
        raise SystemExit(f"{name}: expected {MAX_NEW_TOKENS} tokens, got {generated.tolist()}")
    if not torch.equal(logits.argmax(-1), generated):
        raise SystemExit(f"{name}: generated ids are not the argmax of the raw logits")
    # Every step's logits equal a plain causal forward over the whole sequence.
    sequence = torch.cat([prompt, generated[:-1]]).view(1, -1)
    with torch.no_grad():
        full = model(sequence, use_cache=False).logits[0, prompt.numel() - 1 :].float()
    diff = (full - logits).abs().max().item()
    if diff > 1e-4:
        raise SystemExit(f"{name}: generate's logits differ from a no-cache forward by {diff:.3g}")
    top2 = logits.topk(2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1]).min().item()
    if margin < MIN_MARGIN:
        raise SystemExit(f"{name}: greedy near-tie (margin {margin:.3g}); change the seed")
    return diff, margin


def check_window_matters(name, model, model_class, prompt):
    """A sliding model must give other logits than the same weights without
    the window, or the cross-check would not test the window at all."""
    config = model.config.to_dict()
    if model.config.model_type.startswith("gemma"):  # Gemma's masks need a window: all full
        config.update(layer_types=["full_attention"] * model.config.num_hidden_layers)
    else:
        config.update(sliding_window=None, use_sliding_window=False, layer_types=None)
    unwindowed = model_class(type(model.config).from_dict(config)).eval()
    unwindowed.load_state_dict(model.state_dict())
    with torch.no_grad():
        a = model(prompt.view(1, -1), use_cache=False).logits
        b = unwindowed(prompt.view(1, -1), use_cache=False).logits
    diff = (a - b).abs().max().item()
    if diff < 1e-2:
        raise SystemExit(f"{name}: the sliding window changes nothing ({diff:.3g})")
    print(f"{name}: the sliding window changes the logits of a long prompt by up to {diff:.3g}")


def sliding_layers(model):
    """Which decoder layers transformers actually windows."""
    windows = [getattr(layer.self_attn, "sliding_window", None) for layer in model.model.layers]
    if model.config.model_type in ("mistral", "phi3"):  # the model's window, on every layer
        windows = [model.config.sliding_window] * len(windows)
    return [w is not None for w in windows]


def edit_config(model_dir, edits):
    """Applies edits to a saved config.json (the caller then checks that
    transformers builds the same layers from it)."""
    if not edits:
        return
    path = model_dir / "config.json"
    config = json.loads(path.read_text())
    for field, value in edits.items():
        if value is DROP:
            config.pop(field, None)
        else:
            config[field] = value
    path.write_text(json.dumps(config, indent=2) + "\n")


def make(out_dir, name):
    model_class, config, seed, edits = MODELS[name]
    model = build(model_class, config, seed)
    layer_types = getattr(model.config, "layer_types", None)
    if sliding_layers(model) != EXPECTED_SLIDING[name]:
        raise SystemExit(f"{name}: expected sliding layers {EXPECTED_SLIDING[name]}, "
                         f"transformers built {sliding_layers(model)}")

    generator = torch.Generator().manual_seed(1000 + seed)
    prompts = [torch.randint(FIRST_ID, VOCAB, (n,), generator=generator) for n in PROMPT_LENGTHS]

    if any(EXPECTED_SLIDING[name]):
        check_window_matters(name, model, model_class, max(prompts, key=len))

    cache = "none" if name in NO_CACHE_GREEDY else "static"
    try:
        if cache == "none":
            results = [greedy_no_cache(model, p) for p in prompts]
        else:
            results = [greedy(model, p, cache) for p in prompts]
    except Exception as error:  # noqa: BLE001 - any failure of the static path
        print(f"{name}: StaticCache failed ({type(error).__name__}: {error}); using the dynamic cache")
        cache = "dynamic"
        results = [greedy(model, p, cache) for p in prompts]

    tensors, diffs, margins = {}, [], []
    for i, (prompt, (generated, logits)) in enumerate(zip(prompts, results)):
        diff, margin = check(f"{name} prompt {i}", model, prompt, generated, logits)
        diffs.append(diff)
        margins.append(margin)
        tensors[f"prompt_{i}"] = prompt.to(torch.int64).contiguous()
        tensors[f"generated_{i}"] = generated.to(torch.int64).contiguous()
        tensors[f"logits_{i}"] = logits

    generated_all = torch.cat([g for g, _ in results])
    distinct = generated_all.unique().numel()
    if distinct < MAX_NEW_TOKENS or any(g.unique().numel() < 3 for g, _ in results):
        raise SystemExit(f"{name}: generated tokens barely vary ({generated_all.tolist()})")

    model_dir = out_dir / name
    model.save_pretrained(model_dir, safe_serialization=True)
    edit_config(model_dir, edits)
    reloaded = model_class.from_pretrained(model_dir, use_kernels=False)
    if sliding_layers(reloaded) != EXPECTED_SLIDING[name]:
        raise SystemExit(f"{name}: the saved config.json builds sliding layers "
                         f"{sliding_layers(reloaded)}")
    save_file(
        tensors,
        str(model_dir / "expected.safetensors"),
        metadata={"cache": cache, "num_prompts": str(len(prompts))},
    )
    (model_dir / "prompts.txt").write_text(
        ";".join(",".join(str(t) for t in p.tolist()) for p in prompts) + "\n"
    )
    (model_dir / "expected_ids.txt").write_text(
        "".join(",".join(str(t) for t in g.tolist()) + "\n" for g, _ in results)
    )

    print(
        f"{name}: cache={cache} layer_types={layer_types} "
        f"distinct generated ids={distinct}/{generated_all.numel()} "
        f"max |generate - no-cache forward|={max(diffs):.2e} min greedy margin={min(margins):.3f}"
    )
    for prompt, (generated, _) in zip(prompts, results):
        print(f"  prompt {prompt.tolist()} -> {generated.tolist()}")


def main():
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} OUT_DIR")
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    transformers.utils.logging.disable_progress_bar()
    for name in MODELS:
        make(out_dir, name)


if __name__ == "__main__":
    main()
