#!/usr/bin/env python3
"""statickv.hf's quantized KV caches on real models: accuracy and speed.

usage: hf_quantized.py [--model smollm2=build/smollm2 --model gemma3=build/gemma3]
                       [--passage docs/design.md] [--passage-tokens 2048]
                       [--new-tokens 48] [--rounds 5] [--parts ids,loglik,speed]
                       [--json out.json]

For each model (a Hugging Face checkpoint directory, fp32 weights) and each
kv_dtype (int8, fp8), against the unquantized StaticKVCache:

- ids: greedy ids of 6 chat prompts (the chat template where the
  checkpoint has one; Gemma 3 270M's converted base model has none, so its
  prompts are the questions as text), one left-padded batch through
  statickv.hf.generate, eager: how many of the prompts' generations are
  identical, and the first step at which each differing one diverges.
- loglik: |delta log-likelihood| per token over a local passage (at least
  --passage-tokens tokens of --passage), one protocol for every cache: a
  fixed 16-token prefill, then one token per step (plain forwards, eager),
  each log-probability compared with the unquantized DynamicCache's. Side
  by side: transformers' own QuantizedCache(backend="fp8") (per-tensor scale
  frozen at the prefill; eager, since it cannot compile; full-attention
  models only, as it refuses sliding layers), and the unquantized
  StaticKVCache (the floating-point floor).
- speed: decode time per step, forward compiled with torch.compile
  (inductor, fullgraph, dynamic=False), batch 1, quantized / unquantized
  StaticKVCache, rounds interleaved: the median ratio and its p10-p90.

Offline: nothing is downloaded. On 2 CPU cores, about 20 minutes for both
models.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

import statickv.hf as skh  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KV_DTYPES = ["int8", "fp8"]
PREFILL = 16
QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a hash table is in two sentences.",
    "List three prime numbers greater than 50.",
    "How do plants make their food?",
    "Give me a tip for learning to play the guitar.",
]


def summary(values):
    values = sorted(values)

    def at(f):
        return values[min(len(values) - 1, int(f * (len(values) - 1) + 0.5))]

    return {"median": statistics.median(values), "p10": at(0.1), "p90": at(0.9)}


def load(directory):
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                 attn_implementation="sdpa")
    return model.eval(), AutoTokenizer.from_pretrained(directory)


def cache_for(model, kv_dtype, batch, length, **kwargs):
    return skh.StaticKVCache(model.config, max_batch_size=batch, max_cache_len=length,
                             kv_dtype=kv_dtype, **kwargs)


# -- ids -----------------------------------------------------------------------


def prompt_ids(tokenizer, question):
    """A question through the checkpoint's chat template, or as plain text
    (with the tokenizer's special tokens) for a base model without one."""
    if tokenizer.chat_template is None:
        return tokenizer(question)["input_ids"]
    ids = tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                        add_generation_prompt=True, tokenize=True,
                                        return_dict=False)
    return ids["input_ids"] if isinstance(ids, dict) else list(ids)


def chat_batch(tokenizer):
    rows = [prompt_ids(tokenizer, q) for q in QUESTIONS]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask


def first_divergence(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None


def greedy_ids(model, tokenizer, new_tokens):
    ids, mask = chat_batch(tokenizer)
    length = ids.shape[1] + new_tokens + 1
    runs = {}
    for kv_dtype in [None] + KV_DTYPES:
        cache = cache_for(model, kv_dtype, ids.shape[0], length)
        out = skh.generate(model, cache, ids, attention_mask=mask, max_new_tokens=new_tokens)
        runs[kv_dtype] = out[:, ids.shape[1]:].tolist()
    result = {}
    for kv_dtype in KV_DTYPES:
        firsts = [first_divergence(a, b) for a, b in zip(runs[None], runs[kv_dtype])]
        result[kv_dtype] = {"identical": sum(f is None for f in firsts), "prompts": len(firsts),
                            "first_divergence": firsts}
    return result


# -- log-likelihood ----------------------------------------------------------------


def passage_ids(tokenizer, path, tokens):
    ids = tokenizer(Path(path).read_text(), add_special_tokens=False)["input_ids"]
    if len(ids) < tokens:
        raise SystemExit(f"--passage: expected at least {tokens} tokens but {path} has "
                         f"{len(ids)}")
    return torch.tensor([ids[:tokens]])


@torch.no_grad()
def loglik(model, ids, cache):
    """Log-probability of each token after the prefill: a 16-token prefill,
    then one token per step."""
    out = model(input_ids=ids[:, :PREFILL], cache=cache, use_cache=True)
    logits = [out.logits[0, -1]]
    for t in range(PREFILL, ids.shape[1] - 1):
        out = model(input_ids=ids[:, t:t + 1], cache=cache, use_cache=True)
        logits.append(out.logits[0, -1])
    logp = torch.log_softmax(torch.stack(logits).double(), -1)
    return logp.gather(1, ids[0, PREFILL:, None]).squeeze(1)


def deltas(ours, reference):
    d = (ours - reference).abs()
    finite = d[torch.isfinite(d)]
    return {"mean": float(finite.mean()) if finite.numel() else math.nan,
            "max": float(finite.max()) if finite.numel() else math.nan,
            "non_finite": int(d.numel() - finite.numel()), "tokens": int(d.numel())}


def hf_fp8_cache(model):
    try:
        return transformers.QuantizedCache(backend="fp8", config=model.config), None
    except ValueError as error:
        return None, str(error).split("\n")[0]


def loglik_part(model, tokenizer, args):
    ids = passage_ids(tokenizer, args.passage, args.passage_tokens)
    length = ids.shape[1] + 1
    reference = loglik(model, ids, transformers.DynamicCache(config=model.config))
    result = {"statickv (unquantized)": deltas(loglik(model, ids, cache_for(model, None, 1, length)),
                                               reference)}
    for kv_dtype in KV_DTYPES:
        ours = loglik(model, ids, cache_for(model, kv_dtype, 1, length))
        result[f"statickv {kv_dtype}"] = deltas(ours, reference)
    cache, refusal = hf_fp8_cache(model)
    name = "transformers QuantizedCache fp8"
    result[name] = deltas(loglik(model, ids, cache), reference) if cache else {"refused": refusal}
    return result


# -- speed ---------------------------------------------------------------------------


def timed_generate(model, cache, ids, new_tokens):
    start = time.perf_counter()
    skh.generate(model, cache, ids, max_new_tokens=new_tokens)
    return time.perf_counter() - start


def speed_part(model, args):
    """Decode seconds per step, compiled: (t(1 + n new) - t(1 new)) / n per
    cache, each round running every cache once, in turn."""
    ids = torch.randint(10, model.config.get_text_config().vocab_size, (1, PREFILL),
                        generator=torch.Generator().manual_seed(0))
    n = args.new_tokens
    model.forward = torch.compile(model.forward, backend="inductor", fullgraph=True,
                                  dynamic=False)
    kinds = [None] + KV_DTYPES
    caches = {k: cache_for(model, k, 1, PREFILL + n + 2, batch_buckets=[1],
                           prompt_buckets=[PREFILL]) for k in kinds}
    for k in kinds:  # compile and warm every graph
        timed_generate(model, caches[k], ids, n + 1)
    steps = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for k in kinds:
            long = timed_generate(model, caches[k], ids, n + 1)
            short = timed_generate(model, caches[k], ids, 1)
            steps[k].append((long - short) / n)
    result = {"plain_ms": summary([s * 1e3 for s in steps[None]])}
    for k in KV_DTYPES:
        result[k] = {"ms": summary([s * 1e3 for s in steps[k]]),
                     "ratio": summary([a / b for a, b in zip(steps[k], steps[None])])}
    torch._dynamo.reset()
    return result


# -- report --------------------------------------------------------------------------


def print_model(name, result):
    print(f"== {name}")
    for kv_dtype, r in result.get("ids", {}).items():
        print(f"  greedy ids, {kv_dtype}: {r['identical']}/{r['prompts']} prompts identical; "
              f"first divergence per prompt: {r['first_divergence']}")
    for cache, r in result.get("loglik", {}).items():
        if "refused" in r:
            print(f"  |d loglik| {cache}: refused ({r['refused']})")
        else:
            print(f"  |d loglik| {cache}: mean {r['mean']:.2e} max {r['max']:.2e} over "
                  f"{r['tokens']} tokens ({r['non_finite']} non-finite)")
    speed = result.get("speed")
    if speed:
        p = speed["plain_ms"]
        print(f"  decode ms/step compiled, unquantized: {p['median']:.2f} "
              f"[{p['p10']:.2f}, {p['p90']:.2f}]")
        for k in KV_DTYPES:
            r = speed[k]["ratio"]
            print(f"  decode {k} / unquantized: {r['median']:.3f} [{r['p10']:.3f}, "
                  f"{r['p90']:.3f}] ({speed[k]['ms']['median']:.2f} ms)")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", action="append", metavar="NAME=DIR",
                   help="a checkpoint directory (repeatable; default build/smollm2 and "
                        "build/gemma3)")
    p.add_argument("--passage", default=str(ROOT / "docs/design.md"))
    p.add_argument("--passage-tokens", type=int, default=2048)
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--parts", default="ids,loglik,speed")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--json")
    args = p.parse_args()
    models = args.model or [f"smollm2={ROOT}/build/smollm2", f"gemma3={ROOT}/build/gemma3"]
    args.models = [m.split("=", 1) for m in models]
    args.parts = set(args.parts.split(","))
    unknown = args.parts - {"ids", "loglik", "speed"}
    if unknown:
        p.error(f"--parts: expected ids, loglik or speed but got {sorted(unknown)}")
    return args


def main():
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads, fp32 weights, passage {args.passage} "
          f"({args.passage_tokens} tokens)")
    results = {}
    for name, directory in args.models:
        model, tokenizer = load(directory)
        result = results[name] = {}
        if "ids" in args.parts:
            result["ids"] = greedy_ids(model, tokenizer, args.new_tokens)
        if "loglik" in args.parts:
            result["loglik"] = loglik_part(model, tokenizer, args)
        if "speed" in args.parts:
            result["speed"] = speed_part(model, args)
        print_model(name, result)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
