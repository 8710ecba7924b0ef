#!/usr/bin/env python3
"""The chained decode step, arm against arm, on one set of weights
(Note [chained step], docs/design.md): every arm prefills the same prompt,
then takes N dependent greedy steps, the pick inside the step and the token
fed back on the device, timed with CUDA events on a GPU (the host clock
elsewhere). µs per step per batch and PROMPT+STEPS workload:

  transformers  LlamaForCausalLM with its StaticCache (built and filled by
                the prefill before compiling), the decode step compiled with
                torch.compile(mode="reduce-overhead", fullgraph=True)
  fast          a gpt-fast-style model file of the project's own
                (hf_compare_parts/fast_llama.py), compiled as gpt-fast
                compiles its decode
  statickv      statickv_bench_chained_decode --checkpoint on the same
                checkpoint (--bench; its own rotated rounds, fused path)

The two Python arms are timed in rotated rounds (A-B, B-A); statickv runs in
its own process, so its ratios to them are of medians, not paired, and say
so. The first chain's tokens of the Python arms are compared.

  chained_arms.py --bench BUILD/benchmarks/statickv_bench_chained_decode \\
      [--shape llama-3.2-1b] [--device cuda] [--batches 1,16]
      [--contexts 32+128,1024+128] [--rounds 5] [--json FILE]
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_compare_parts.common import DTYPES, checkpoint, hf_config, summary, text  # noqa: E402
from hf_compare_parts.fast_llama import FastLlama, decode_one_token  # noqa: E402

import torch  # noqa: E402
from transformers import LlamaForCausalLM, StaticCache  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", default="", help="statickv_bench_chained_decode (the statickv arm)")
    p.add_argument("--shape", default="tiny", help="tiny or llama-3.2-1b (hf_compare's shapes)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default=None, help="fp32, fp16, bf16 (default fp32 cpu, bf16 cuda)")
    p.add_argument("--batches", default="1,16")
    p.add_argument("--contexts", default="32+128", help="PROMPT+STEPS, comma-separated")
    p.add_argument("--arms", default="transformers,fast", help="the Python arms")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--compile-backend", default="inductor",
                   help="inductor (reduce-overhead), or eager/aot_eager to check the plumbing")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default="results/hf")
    p.add_argument("--json", default="")
    args = p.parse_args()
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    args.contexts = [tuple(int(n) for n in c.split("+")) for c in args.contexts.split(",")]
    args.batches = [int(b) for b in args.batches.split(",")]
    return args


def compiled(fn, args):
    if args.compile_backend == "inductor":
        return torch.compile(fn, mode="reduce-overhead", fullgraph=True)
    return torch.compile(fn, backend=args.compile_backend, fullgraph=True)


def mark_step():
    # Each call of a reduce-overhead function is a new step of its graphs.
    if hasattr(torch.compiler, "cudagraph_mark_step_begin"):
        torch.compiler.cudagraph_mark_step_begin()


class TransformersArm:
    """transformers' own model and StaticCache; the cache's device length
    counter is the only position, so a chain rewinds by resetting it."""

    def __init__(self, args, directory, batch, prompt, steps):
        device = torch.device(args.device)
        self.model = LlamaForCausalLM.from_pretrained(directory, dtype=DTYPES[args.dtype],
                                                      attn_implementation="sdpa").to(device).eval()
        self.cache = StaticCache(config=self.model.config, max_cache_len=prompt + steps + 2)
        self.prompt = prompt
        ids = prompts(args, batch, prompt, self.model.config.vocab_size).to(device)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, cache=self.cache, use_cache=True).logits
        self.first = logits[:, -1].argmax(-1, keepdim=True)
        model, cache = self.model, self.cache

        def step(cur):
            logits = model(input_ids=cur, cache=cache, use_cache=True, logits_to_keep=1).logits
            return logits[:, -1].argmax(-1, keepdim=True)

        self.step_fn = compiled(step, args)
        self.cur = self.first.clone()

    def rewind(self):
        for layer in self.cache.layers:
            layer.cumulative_length.fill_(self.prompt)
        self.cur = self.first.clone()

    def step(self):
        mark_step()
        with torch.inference_mode():
            nxt = self.step_fn(self.cur)
        self.cur = nxt.clone()
        return self.cur


class FastArm:
    """The gpt-fast-style model: positions are a device tensor advanced in place."""

    def __init__(self, args, directory, batch, prompt, steps):
        device = torch.device(args.device)
        config = hf_config(args.shape)
        self.model = FastLlama(config, Path(directory), DTYPES[args.dtype], device, batch,
                               prompt + steps + 2)
        ids = prompts(args, batch, prompt, config.vocab_size).to(device)
        with torch.inference_mode():
            logits = self.model(ids, torch.arange(prompt, device=device))
        self.first = logits[:, -1].argmax(-1, keepdim=True)
        self.prompt = prompt
        self.pos = torch.tensor([prompt], device=device)
        self.step_fn = compiled(lambda cur, pos: decode_one_token(self.model, cur, pos), args)
        self.cur = self.first.clone()

    def rewind(self):
        self.pos.fill_(self.prompt)
        self.cur = self.first.clone()

    def step(self):
        mark_step()
        with torch.inference_mode():
            nxt = self.step_fn(self.cur, self.pos)
        self.pos += 1
        self.cur = nxt.clone()
        return self.cur


ARMS = {"transformers": TransformersArm, "fast": FastArm}


def prompts(args, batch, prompt, vocab):
    """Every arm's prompt ids [batch, prompt], from --seed."""
    g = torch.Generator().manual_seed(args.seed + 1)
    return torch.randint(1, vocab, (batch, prompt), generator=g)


def time_chain(arm, steps, device):
    """Seconds per step of one chain from the rewound start, and its tokens."""
    arm.rewind()
    tokens = []
    if device.type == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            tokens.append(arm.step())
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / steps, tokens
    begin = time.perf_counter()
    for _ in range(steps):
        tokens.append(arm.step())
    return (time.perf_counter() - begin) / steps, tokens


def python_arms(args, directory, batch, prompt, steps):
    """The Python arms of one batch and workload, in rotated rounds."""
    device = torch.device(args.device)
    names = [a for a in args.arms.split(",") if a]
    arms = {name: ARMS[name](args, directory, batch, prompt, steps) for name in names}
    firsts = {}
    for name, arm in arms.items():  # compile and warm up; keep the first chain's tokens
        _, tokens = time_chain(arm, steps, device)
        firsts[name] = torch.cat([arm.first] + tokens, dim=1).cpu()
    samples = {name: [] for name in names}
    for r in range(args.rounds):
        for j in range(len(names)):
            name = names[(j + r) % len(names)]
            samples[name].append(time_chain(arms[name], steps, device)[0])
    out = {name: summary(s) for name, s in samples.items()}
    if len(names) == 2:
        a, b = firsts[names[0]], firsts[names[1]]
        out["same_tokens_fraction"] = float((a == b).float().mean())
    del arms
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def statickv_arm(args, directory):
    """statickv_bench_chained_decode on the same checkpoint, fused path."""
    if not args.bench:
        return {}
    out = Path(args.workdir) / "chained_statickv.json"
    command = [args.bench, "--checkpoint", str(directory), "--device", args.device,
               "--dtype", args.dtype, "--batch", ",".join(str(b) for b in args.batches),
               "--contexts", ",".join(f"{p}+{n}" for p, n in args.contexts),
               "--paths", "fused", "--rounds", str(args.rounds), "--json", str(out)]
    run = subprocess.run(command, capture_output=True, text=True)
    print(run.stdout[-2000:], flush=True)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} ... exited {run.returncode}: {run.stderr[-2000:]}")
    rows = json.loads(out.read_text())["arms"]
    return {(r["batch"], r["prompt"], r["steps"]): {k: r["step_s"][k] for k in ("median", "p10", "p90")}
            for r in rows}


def main():
    args = parse_args()
    device = torch.device(args.device)
    directory = checkpoint(args.workdir, args.shape, args.seed, device)
    results = {"benchmark": "chained_arms", "command": " ".join(sys.argv), "shape": args.shape,
               "device": args.device, "dtype": args.dtype, "torch": torch.__version__,
               "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
               "rounds": args.rounds, "compile_backend": args.compile_backend, "cells": []}
    statickv = statickv_arm(args, directory)
    print(f"\n{'batch':>5} {'workload':>10} {'arm':>13} {'µs/step [p10, p90]':>28} "
          f"{'x statickv':>11}")
    for prompt, steps in args.contexts:
        for batch in args.batches:
            cell = {"batch": batch, "prompt": prompt, "steps": steps,
                    "arms": python_arms(args, directory, batch, prompt, steps)}
            if (batch, prompt, steps) in statickv:
                cell["arms"]["statickv"] = statickv[(batch, prompt, steps)]
            base = cell["arms"].get("statickv")
            for name, s in cell["arms"].items():
                if not isinstance(s, dict):
                    continue
                ratio = f"{s['median'] / base['median']:.3f}" if base else "-"
                print(f"{batch:>5} {f'{prompt}+{steps}':>10} {name:>13} {text(s, 1e6, 1):>28} "
                      f"{ratio:>11}", flush=True)
                if base:
                    cell.setdefault("ratio_to_statickv_unpaired", {})[name] = s["median"] / base["median"]
            if "same_tokens_fraction" in cell["arms"]:
                print(f"      tokens equal between the Python arms: "
                      f"{cell['arms']['same_tokens_fraction']:.3f}")
            results["cells"].append(cell)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
