#!/usr/bin/env python3
"""A long document continued on the rings: Gemma 3 270M, statickv's hybrid
cache against transformers (scripts/demo.sh's longdoc section).

usage: gemma3_long_document.py --checkpoint DIR --demo BUILD/apps/statickv-demo
                               [--document FILE] [--tokens 3000] [--new-tokens 16]

The prompt is <bos> and the first --tokens - 1 tokens of --document (default
docs/design.md), several times Gemma's 512-token window. statickv-demo
continues it greedily through the hybrid cache (15 sliding layers as rings,
3 full layers; chunks of --max-chunk tokens), transformers through its
default cache; both in float32 on the CPU. Printed: whether the new ids are
identical, the text, the prefill and decode times, and the cache bytes of
the hybrid cache beside an all-full cache of the same length (every layer
holding every position) and transformers' cache after its run. Exit status
1 when the ids differ.
"""

import argparse
import sys
import time
from pathlib import Path

from gemma3_hybrid import hf_run, statickv_run  # noqa: E402  (sets the offline env first)

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def all_full_bytes(config, length):
    """Keys and values of every layer over `length` positions (+ the scratch
    slot, as statickv's full layers hold), float32, one row."""
    per_slot = 2 * config.num_key_value_heads * config.head_dim * 4
    return per_slot * config.num_hidden_layers * (length + 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--demo", required=True)
    parser.add_argument("--document", default=str(ROOT / "docs" / "design.md"))
    parser.add_argument("--tokens", type=int, default=3000)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--max-chunk", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(args.checkpoint)
    ids = tok(Path(args.document).read_text(encoding="utf-8")).input_ids[: args.tokens]
    if len(ids) < args.tokens:
        sys.exit(f"{args.document}: {len(ids)} tokens, fewer than --tokens {args.tokens}")
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32,
                                                 use_kernels=False).eval()
    window = model.config.sliding_window
    print(f"prompt: {len(ids)} tokens of {Path(args.document).name} "
          f"({len(ids) / window:.1f}x the {window}-token window)", flush=True)

    got, sk_prefill, sk_decode, sk_bytes = statickv_run(args, ids, args.new_tokens)
    want, hf_prefill, hf_decode, hf_bytes = hf_run(model, ids, args.new_tokens, "dynamic")
    full = all_full_bytes(model.config, len(ids) + args.new_tokens)
    n = args.new_tokens - 1
    mib = 1 << 20
    print(f"continuation: {tok.decode(got)!r}")
    print(f"statickv hybrid   prefill {sk_prefill:6.2f} s, decode {sk_decode * 1e3 / n:6.1f} "
          f"ms/token, cache {sk_bytes / mib:7.2f} MiB")
    print(f"transformers      prefill {hf_prefill:6.2f} s, decode {hf_decode * 1e3 / n:6.1f} "
          f"ms/token, cache {hf_bytes / mib:7.2f} MiB (its DynamicCache at the end)")
    print(f"all-full cache of {len(ids) + args.new_tokens} positions: {full / mib:7.2f} MiB "
          f"({full / sk_bytes:.1f}x the hybrid cache)")
    same = got == want
    print(f"ids identical to transformers': {same}"
          + ("" if same else f"\n  statickv     {got}\n  transformers {want}"))
    print(f"[{time.perf_counter() - t0:.0f} s]")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
