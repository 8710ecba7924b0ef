#!/usr/bin/env python3
"""How often bf16 and fp16 SmolLM2 answers equal the fp32 ones (a report,
not a pass/fail test).

usage: smollm2_agreement.py --demo EXE --checkpoint DIR --prompts FILE
                            [--new-tokens 32] [--device cpu] [--json OUT]

statickv-demo --chat answers every prompt of FILE (one a line) greedily in
one ragged batch through a StaticCache, once per dtype (fp32, bf16, fp16;
the checkpoint's float32 weights rounded to the dtype). For bf16 and fp16,
per prompt: whether the ids equal fp32's, and how many leading ids agree
before the first difference. Rounding in 16 bits moves logits by about 1e-2,
so a greedy pick flips where fp32's two best logits are that close; after a
flip the answers go their own ways.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path


def answers(args, dtype):
    """Generated ids per prompt, one line each from --print-ids."""
    command = [args.demo, "--checkpoint", args.checkpoint, "--device", args.device, "--dtype",
               dtype, "--chat", "--prompts-file", args.prompts, "--max-new-tokens",
               str(args.new_tokens), "--no-compare", "--print-ids"]
    run = subprocess.run(command, capture_output=True, text=True, encoding="utf-8")
    if run.returncode != 0:
        sys.exit(f"smollm2_agreement: {' '.join(command)} exited {run.returncode}:\n{run.stderr}")
    lines = run.stdout.strip().splitlines()[-args.count:]
    return [[int(t) for t in line.split(",")] for line in lines]


def leading_agreement(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--demo", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    prompts = [p for p in Path(args.prompts).read_text(encoding="utf-8").splitlines() if p.strip()]
    args.count = len(prompts)
    reference = answers(args, "fp32")
    report = {"benchmark": "smollm2_agreement", "device": args.device,
              "new_tokens": args.new_tokens, "prompts": prompts, "dtypes": {}}
    print(f"greedy agreement with fp32, {len(prompts)} chat prompts, up to {args.new_tokens} "
          f"new tokens, statickv-demo on {args.device}")
    print(f"  {'dtype':<6} {'identical answers':>18} {'leading ids equal (per prompt)':>40}")
    for dtype in ("bf16", "fp16"):
        got = answers(args, dtype)
        lead = [leading_agreement(g, r) for g, r in zip(got, reference)]
        same = sum(g == r for g, r in zip(got, reference))
        report["dtypes"][dtype] = {"identical": same, "leading_equal": lead,
                                   "lengths": [len(r) for r in reference]}
        shown = ", ".join(f"{n}/{len(r)}" for n, r in zip(lead, reference))
        print(f"  {dtype:<6} {f'{same} of {len(prompts)}':>18} {shown:>40}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
