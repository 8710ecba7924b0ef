#!/usr/bin/env python3
"""Gemma 3 270M through statickv's hybrid cache against transformers' caches.

usage: gemma3_hybrid.py --checkpoint DIR --demo BUILD/apps/statickv-demo
                        [--contexts 1024,4096,8192] [--new-tokens 16]
                        [--max-chunk 64] [--rounds 1] [--threads 0] [--json FILE]

DIR is what tools/gemma3/convert.py wrote (float32). Everything runs in
float32 on the CPU, greedy, eos ignored, one row.

memory   For 8k and 32k tokens: the bytes of statickv's hybrid cache (a
         HybridCache built through statickv.hf.StaticKVCache: full layers of
         max_len slots, sliding layers as rings of sliding_window +
         max_chunk - 1 slots; at --max-chunk and at the window, 512) and the
         formula's value; transformers' StaticCache sized max_cache_len =
         context (its sliding layers hold the window), measured after one
         forward pass allocated it; and an all-full cache (every layer
         max_len slots) for reference.
decode   For each context length L of --contexts: a seeded random prompt of
         L - 1 ids after <bos>, --new-tokens generated through
           statickv   statickv-demo --cache hybrid --eager --prefill-chunk
                      --max-chunk (its --json timings: prefill, decode)
           hf-static  transformers' StaticCache, max_cache_len = L +
                      new tokens (generate, sdpa, no compilation)
           hf-dynamic transformers' default DynamicCache
         interleaved round by round (rounds alternate the order). Reported:
         prefill seconds, decode ms per token, the ratios hf / statickv, and
         whether the three generated the same ids.

Takes about 5 minutes a round on two cores at the default contexts.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, GenerationConfig, StaticCache  # noqa: E402

import statickv  # noqa: E402
from hf_compare import TokenTimes  # noqa: E402  (the streamer that times each token)
import statickv.hf  # noqa: E402


def cache_bytes(model, max_chunk, contexts):
    """{context: {statickv at max_chunk, statickv at the window, formula, hf, all_full}}."""
    config = model.config
    window = config.sliding_window
    kv, dim, size = config.num_key_value_heads, config.head_dim, 4  # float32
    full = sum(t == "full_attention" for t in config.layer_types)
    sliding = len(config.layer_types) - full
    rows = {}
    for length in contexts:  # statickv's caches: float32, one row
        row = {}
        for name, chunk in (("statickv", max_chunk), ("statickv_chunk_window", window)):
            cache = statickv.hf.StaticKVCache(config, 1, length, max_chunk=chunk,
                                              dtype=torch.float32)
            row[name] = cache.native.memory_bytes()
            row[name + "_estimate"] = statickv.estimate_memory_bytes(cache.native.config)
            # Keys and values: every layer's slots plus its scratch slot
            # (Invariant [scratch slot]); the rest is the position table.
            ring = min(window + chunk - 1, length)
            row[name + "_kv_formula"] = 2 * kv * dim * size * (full * (length + 1) +
                                                                sliding * (ring + 1))
        row["all_full"] = 2 * kv * dim * size * len(config.layer_types) * length
        row["hf_static"] = hf_static_bytes(model, length)
        rows[length] = row
    return rows


def hf_static_bytes(model, length):
    """transformers' StaticCache for `length` tokens, after one forward pass
    allocated its layers."""
    cache = StaticCache(config=model.config, max_cache_len=length)
    with torch.inference_mode():
        model(torch.tensor([[2]]), cache=cache, use_cache=True)
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)


def hf_run(model, ids, new_tokens, cache):
    """(new ids, prefill s, decode s, cache bytes) through transformers' generate."""
    past = StaticCache(config=model.config, max_cache_len=len(ids) + new_tokens) \
        if cache == "static" else None
    config = GenerationConfig(do_sample=False, max_new_tokens=new_tokens,
                              min_new_tokens=new_tokens, disable_compile=True,
                              eos_token_id=None, pad_token_id=0, return_dict_in_generate=True)
    streamer = TokenTimes()
    prompt = torch.tensor([ids])
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                             generation_config=config, cache=past, streamer=streamer)
    t = streamer.times
    held = sum(layer.keys.nbytes + layer.values.nbytes for layer in out.past_key_values.layers)
    return out.sequences[0, len(ids):].tolist(), t[1] - start, t[-1] - t[1], held


def statickv_run(args, ids, new_tokens):
    """(new ids, prefill s, decode s, cache bytes) through statickv-demo."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "run.json"
        command = [args.demo, "--checkpoint", args.checkpoint, "--device", "cpu",
                   "--dtype", "fp32", "--cache", "hybrid", "--eager", "--no-compare",
                   "--ignore-eos", "--prefill-chunk", str(args.max_chunk),
                   "--max-new-tokens", str(new_tokens),
                   "--prompt-ids", ",".join(map(str, ids)), "--json", str(out)]
        if args.threads:
            command += ["--threads", str(args.threads)]
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"statickv-demo exited {run.returncode}: {run.stderr[-2000:]}")
        reply = json.loads(out.read_text())
    return reply["tokens"][0], reply["prefill_seconds"], reply["decode_seconds"], \
        reply["cache_bytes"]


def decode_runs(args, model, length):
    generator = torch.Generator().manual_seed(length)
    ids = [2] + torch.randint(3, model.config.vocab_size, (length - 1,),
                              generator=generator).tolist()
    n = args.new_tokens
    runs = {"statickv": [], "hf-static": [], "hf-dynamic": []}
    tokens = {}
    for r in range(args.rounds):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        for name in order:
            if name == "statickv":
                got, prefill, decode, _ = statickv_run(args, ids, n)
            else:
                got, prefill, decode, _ = hf_run(model, ids, n, name.split("-")[1])
            tokens[name] = got
            runs[name].append((prefill, decode * 1e3 / (n - 1)))
            print(f"  {length:6d} {name:10s} round {r}: prefill {prefill:7.2f} s, decode "
                  f"{runs[name][-1][1]:7.1f} ms/token", flush=True)
    best = {name: (min(p for p, _ in v), min(d for _, d in v)) for name, v in runs.items()}
    identical = tokens["statickv"] == tokens["hf-static"] == tokens["hf-dynamic"]
    return {"context": length, "best": best, "identical_tokens": identical, "tokens": tokens}


def print_memory(rows, max_chunk):
    mib = 1 << 20
    print(f"\ncache bytes (float32, one row) at {' / '.join(f'{k} tokens' for k in rows)}")
    for key, label in (("statickv", f"statickv hybrid (max_chunk {max_chunk})"),
                       ("statickv_chunk_window", "statickv hybrid (max_chunk = window)"),
                       ("hf_static", "transformers StaticCache"),
                       ("all_full", "all-full cache")):
        values = " / ".join(f"{rows[k][key] / mib:8.2f} MiB" for k in rows)
        print(f"  {label:40s} {values}")
    for k, row in rows.items():
        print(f"  {k:6d} tokens: statickv / transformers {row['statickv'] / row['hf_static']:.3f}x "
              f"(max_chunk = window: {row['statickv_chunk_window'] / row['hf_static']:.3f}x), "
              f"estimate_memory_bytes {'equal' if row['statickv'] == row['statickv_estimate'] else 'DIFFERS'}, "
              f"K/V formula + {row['statickv'] - row['statickv_kv_formula']} bytes of positions, "
              f"all-full / statickv {row['all_full'] / row['statickv']:.2f}x")


def print_decode(results):
    print("\ncontext  impl        prefill s  decode ms/token  hf/statickv decode  identical ids")
    for result in results:
        sk = result["best"]["statickv"]
        for name, (prefill, decode) in result["best"].items():
            ratio = "" if name == "statickv" else f"{decode / sk[1]:.2f}x"
            print(f"  {result['context']:6d} {name:10s} {prefill:9.2f} {decode:16.1f} "
                  f"{ratio:>19s}  {result['identical_tokens']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--demo", required=True)
    parser.add_argument("--contexts", default="1024,4096,8192")
    parser.add_argument("--memory-contexts", default="8192,32768")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--max-chunk", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32,
                                                 attn_implementation="sdpa",
                                                 use_kernels=False).eval()
    memory = cache_bytes(model, args.max_chunk,
                         [int(x) for x in args.memory_contexts.split(",")])
    print_memory(memory, args.max_chunk)
    print("\ndecode runs", flush=True)
    results = [decode_runs(args, model, int(x)) for x in args.contexts.split(",")]
    print_decode(results)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"torch": torch.__version__, "threads": torch.get_num_threads(),
             "max_chunk": args.max_chunk, "new_tokens": args.new_tokens, "rounds": args.rounds,
             "memory": memory, "decode": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
