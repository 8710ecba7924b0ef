#!/usr/bin/env python3
"""Hugging Face's continuous batching on the trace statickv_bench_serving replays.

usage: statickv_bench_serving ... --trace-out trace.json
       hf_serving.py --trace trace.json --shape llama-3.2-1b --device cuda [--json out.json]

Replays the trace in real time through transformers' continuous-batching
manager (the engine behind `model.generate_batch`: `init_continuous_batching`,
`add_request` at each request's arrival time, greedy, `max_new_tokens` per
request, no eos stop) and prints the rows statickv_bench_serving prints:
throughput (requested tokens / makespan), p50/p99 time to first token and
per-token latency. The model is the shape's config with seeded random weights
(benchmarks/hf_compare.py's); statickv's run uses its own random weights of
the same shape, so the two are compared on speed, not on tokens.

Status: written for the GPU run (benchmarks/gpu/run_gpu.sh), which has not
happened yet; it has run on the CPU only, on the tiny shape (a plumbing
check, 20 requests).
Offline: nothing is downloaded.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from transformers import GenerationConfig  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_compare import DTYPES, checkpoint, load_hf  # noqa: E402


def percentile(values, p):
    values = sorted(values)
    if not values:
        return 0.0
    rank = max(1, int(-(-p * len(values) // 1)))  # nearest rank, as statickv_bench_serving
    return values[min(len(values), rank) - 1]


def replay(manager, trace):
    """Adds each request at its arrival time; returns per-request results."""
    requests = trace["requests"]
    start = time.perf_counter()
    results, arrivals, nxt = {}, {}, 0
    while len(results) < len(requests):
        now = time.perf_counter() - start
        if now > requests[-1]["arrival_s"] + 600:
            raise SystemExit(f"hf_serving: {len(results)} of {len(requests)} requests finished "
                             "600 s after the last arrival")
        while nxt < len(requests) and requests[nxt]["arrival_s"] <= now:
            r = requests[nxt]
            arrivals[str(nxt)] = start + r["arrival_s"]
            manager.add_request(r["prompt"], request_id=str(nxt),
                                max_new_tokens=r["max_new_tokens"], record_timestamps=True)
            nxt += 1
        wait = requests[nxt]["arrival_s"] - now if nxt < len(requests) else 1.0
        out = manager.get_result(timeout=max(0.0005, min(wait, 1.0)))
        if out is not None and out.is_finished():
            results[out.request_id] = (out, time.perf_counter())
    return start, arrivals, results


def summarize(start, arrivals, results, tokens):
    ttft, per_token, makespan = [], [], 0.0
    for rid, (out, finished) in results.items():
        stamps = out.timestamps or []
        makespan = max(makespan, finished - start)
        if stamps:
            ttft.append(stamps[0] - arrivals[rid])
        if len(stamps) >= 2:
            per_token.append((stamps[-1] - stamps[0]) / (len(stamps) - 1))
    return {"tokens_per_s": tokens / makespan if makespan else 0.0, "makespan_s": makespan,
            "ttft_p50_s": percentile(ttft, 0.5), "ttft_p99_s": percentile(ttft, 0.99),
            "per_token_p50_s": percentile(per_token, 0.5),
            "per_token_p99_s": percentile(per_token, 0.99)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace", required=True, help="statickv_bench_serving --trace-out FILE")
    parser.add_argument("--shape", default="llama-3.2-1b", help="tiny or llama-3.2-1b")
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default=None, help="fp32, fp16, bf16 (default bf16 on cuda)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default="results/hf", help="checkpoints are kept here")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    device = torch.device(args.device)
    trace = json.loads(Path(args.trace).read_text())
    tokens = sum(r["max_new_tokens"] for r in trace["requests"])

    model = load_hf(checkpoint(args.workdir, args.shape, args.seed, device), DTYPES[args.dtype],
                    device, compiled=False)
    config = GenerationConfig(do_sample=False, eos_token_id=None, pad_token_id=0,
                              max_new_tokens=max(r["max_new_tokens"] for r in trace["requests"]))
    manager = model.init_continuous_batching(generation_config=config)
    manager.start()
    try:
        # Warm-up, untimed: the manager's thread starts, allocates its paged
        # cache and (CUDA) captures before the first request is served.
        first = trace["requests"][0]["prompt"]
        manager.add_request(first, request_id="warmup", max_new_tokens=2)
        deadline = time.perf_counter() + 300
        while (out := manager.get_result(timeout=1)) is None or out.request_id != "warmup" \
                or not out.is_finished():
            if time.perf_counter() > deadline:
                raise SystemExit("hf_serving: the warm-up request did not finish in 300 s")
        summary = summarize(*replay(manager, trace), tokens)
    finally:
        manager.stop(block=True)
    print(f"hf_serving: {args.shape} ({args.dtype}) on {args.device}, "
          f"{len(trace['requests'])} requests, {tokens} tokens")
    print(f"{'hf-cb':<12} {summary['tokens_per_s']:>10.1f} {summary['makespan_s']:>10.2f} "
          f"{summary['ttft_p50_s'] * 1e3:>10.1f} {summary['ttft_p99_s'] * 1e3:>10.1f} "
          f"{summary['per_token_p50_s'] * 1e3:>12.2f} {summary['per_token_p99_s'] * 1e3:>12.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"benchmark": "hf_serving", "shape": args.shape,
                                               "dtype": args.dtype, "device": args.device,
                                               "hf_continuous_batching": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
