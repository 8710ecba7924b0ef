#!/usr/bin/env python3
"""Prompt-lookup decoding and beam search, side by side: plain
model.generate through statickv.hf.StaticKVCache, transformers' StaticCache
and DynamicCache, and statickv's own loop (statickv.hf.generate, eager), on
one checkpoint (SmolLM2 from the build tree), identical tokens required.

usage: hf_generate_modes.py --checkpoint DIR [--threads 1] [--rounds 3]
                            [--new-tokens 48] [--beams 4] [--lookup 8]
                            [--json OUT]

Each round times every (mode, cache) pair once, in turn (interleaved, so a
drift of the machine's speed hits all alike); the table gives the median
tokens/s over rounds and each cache's ratio to DynamicCache's, paired per
round. The prompt repeats a passage so prompt lookup finds its drafts;
there is no stop token (eos_token_id=None), so every run makes the same
number of tokens, and every variant's new ids must equal DynamicCache's,
else the run fails.
Both static caches are sized max_cache_len = prompt + new tokens + N + 1
(a verification step may run past the last token kept); StaticKVCache
takes max_chunk = max(N + 1, 16), so a verification step is one chunk.
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import DynamicCache, StaticCache  # noqa: E402

import statickv.hf as skh  # noqa: E402

PASSAGE = ("The cache holds the keys and values of every token the model has seen, so a new "
           "token attends to the past without recomputing it. ")


def prompt_ids(tokenizer):
    text = ("Repeat the passage below exactly.\n\n" + PASSAGE * 3 + "\n\nThe passage again:\n"
            + PASSAGE)
    return tokenizer(text, return_tensors="pt").input_ids


def make_cache(name, model, batch, length, chunk):
    if name == "dynamic":
        return DynamicCache(config=model.config)
    if name == "static":
        return StaticCache(config=model.config, max_cache_len=length)
    return skh.StaticKVCache(model.config, max_batch_size=batch, max_cache_len=length,
                             max_chunk=chunk)


def run(model, ids, mode, cache_name, args):
    batch = args.beams if mode == "beams" else 1
    if cache_name == "statickv-loop":
        return run_loop(model, ids, mode, batch, args)
    # A verification step may run past the last kept token: room for it.
    length = ids.shape[1] + args.new_tokens + args.lookup + 1
    cache = make_cache(cache_name, model, batch, length, max(args.lookup + 1, 16))
    # No stop token: every run makes exactly --new-tokens tokens.
    kwargs = dict(max_new_tokens=args.new_tokens, eos_token_id=None, do_sample=False,
                  cache=cache)
    if mode == "beams":
        kwargs.update(num_beams=args.beams, early_stopping=True)
    else:
        kwargs.update(prompt_lookup_num_tokens=args.lookup)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
    seconds = time.perf_counter() - start
    return out[0, ids.shape[1]:].tolist(), seconds


def run_loop(model, ids, mode, batch, args):
    """statickv.hf.generate, statickv's own loop (eager here), on a StaticKVCache."""
    length = ids.shape[1] + args.new_tokens + args.lookup + 1
    # Prompt buckets up to 256 (the prompt prefills in one padded chunk);
    # verification steps pad to a power of two.
    cache = skh.StaticKVCache(model.config, max_batch_size=batch, max_cache_len=length,
                              max_chunk=min(256, length))
    kwargs = dict(max_new_tokens=args.new_tokens, eos_token_id=None)
    if mode == "beams":
        kwargs.update(num_beams=args.beams, early_stopping=True)
    else:
        kwargs.update(prompt_lookup_num_tokens=args.lookup)
    start = time.perf_counter()
    out = skh.generate(model, cache, ids, **kwargs)
    seconds = time.perf_counter() - start
    return out[0, ids.shape[1]:].tolist(), seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--lookup", type=int, default=8)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.rounds < 1 or args.new_tokens < 1 or args.beams < 2 or args.lookup < 1:
        sys.exit("hf_generate_modes: --rounds, --new-tokens and --lookup must be >= 1, "
                 "--beams >= 2")
    torch.set_num_threads(args.threads)
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.checkpoint,
                                                              dtype=torch.float32,
                                                              use_kernels=False).eval()
    model.generation_config.pad_token_id = tokenizer.eos_token_id
    ids = prompt_ids(tokenizer)
    caches = ["dynamic", "static", "statickv", "statickv-loop"]
    modes = ["lookup", "beams"]
    seconds = {(m, c): [] for m in modes for c in caches}
    tokens = {}
    run(model, ids, "lookup", "statickv", args)  # warm-up
    for _ in range(args.rounds):
        for mode in modes:
            for cache in caches:
                new, took = run(model, ids, mode, cache, args)
                seconds[(mode, cache)].append(took)
                tokens.setdefault((mode, cache), new)
                if tokens[(mode, cache)] != new or tokens[(mode, "dynamic")] != new:
                    sys.exit(f"hf_generate_modes: {mode} with the {cache} cache gave other "
                             f"tokens than DynamicCache:\n{new}\n{tokens[(mode, 'dynamic')]}")
    rows = []
    print(f"# plain model.generate, {args.checkpoint}, prompt {ids.shape[1]} tokens, "
          f"{args.new_tokens} new, {args.threads} thread(s), {args.rounds} rounds, "
          f"torch {torch.__version__}, transformers {transformers.__version__}")
    print("| mode | cache | tokens/s (median) | vs DynamicCache (median of paired ratios) |")
    print("| --- | --- | --- | --- |")
    for mode in modes:
        base = seconds[(mode, "dynamic")]
        for cache in caches:
            times = seconds[(mode, cache)]
            ratio = statistics.median(b / t for b, t in zip(base, times))
            rate = args.new_tokens / statistics.median(times)
            label = (f"prompt lookup N={args.lookup}" if mode == "lookup"
                     else f"beam search, {args.beams} beams")
            print(f"| {label} | {cache} | {rate:.1f} | {ratio:.3f}x |")
            rows.append(dict(mode=mode, cache=cache, tokens_per_second=rate,
                             speed_vs_dynamic=ratio, seconds=times))
    print("tokens identical across caches: yes")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(checkpoint=args.checkpoint, prompt_tokens=ids.shape[1],
                           new_tokens=args.new_tokens, threads=args.threads,
                           rounds=args.rounds, beams=args.beams, lookup=args.lookup,
                           torch=torch.__version__, transformers=transformers.__version__,
                           rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
