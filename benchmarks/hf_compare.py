#!/usr/bin/env python3
"""statickv against what users run today: Hugging Face transformers' static cache.

usage: hf_compare.py --exe BUILD/apps/statickv-serve [options]
       hf_compare.py --parts seeds [options]        (the Python package's scenarios)
       hf_compare.py --parts smollm2 --checkpoint DIR --demo BUILD/apps/statickv-demo [options]

For each shape (tiny, llama-3.2-1b: random weights, seeded), builds the model
in transformers, saves it as a checkpoint (config.json + model.safetensors,
kept in --workdir for later runs) and loads the same weights in both:

  hf        LlamaForCausalLM.generate(cache_implementation="static"), sdpa
            attention; auto-compilation off (disable_compile=True)
  statickv  statickv-serve --checkpoint DIR --max-batch 1: the reference decoder
            over a StaticCache, a long-lived server (eager exact shapes on the
            CPU, bucketed CUDA graphs on a GPU), driven over JSON lines

Both generate the same greedy tokens for the same prompt, interleaved in one
run (rounds alternate which goes first). Reported per implementation: time to
the first token (prefill), decode ms/token, and the paired per-round ratios
statickv / hf; and whether the generated tokens are identical.

On CUDA, also:
  hf-compile    the same model through transformers' own compiled path:
                GenerationConfig(compile_config=CompileConfig(fullgraph=True,
                mode="reduce-overhead")), which compiles the decode step
                (torch.compile + CUDA graphs) and runs prefill eagerly. The
                forward is not wrapped in torch.compile here: transformers
                creates its static cache lazily inside the first call, so
                under reduce-overhead its tensors would be CUDA-graph outputs
                that the next replay overwrites.
  new lengths   for each of --new-lengths (prompt lengths not seen before),
                the time to the first token of the first request, from a
                fresh hf-compile model and a fresh statickv server: what a
                new prompt length costs (recompilation vs a bucket capture)

--parts smollm2, with --checkpoint DIR (a real model: SmolLM2-135M-Instruct
from tools/smollm2/convert.py) and --demo EXE (statickv-demo):

  smollm2       one chat prompt (--chat-text) at batch --batches (default 1,8),
                --new-tokens each, eos ignored on both sides so every row does
                the same work: prefill tokens/s and decode tokens/s of
                transformers with its DynamicCache (hf-dynamic) and its
                StaticCache (hf-static), and of statickv-demo through a
                StaticCache (its --json timings; eager exact shapes on the CPU,
                bucketed CUDA graphs on a GPU),
                interleaved round by round. --compile adds hf-static with
                model.forward compiled by torch.compile(fullgraph=True) as
                transformers' docs show for static caches (minutes on a CPU:
                the full benchmark mode only).
--parts seeds: the two problems statickv was built for, end to end with
compile time included, through the Python package (pip install
--no-build-isolation .), the forward compiled as a user would
(torch.compile(model.forward, dynamic=False, fullgraph=True), Inductor;
mode="reduce-overhead" on CUDA):
  seed_37394    batch 4, 2, 3, 1 (48-token prompts)
  seed_29151    16 prompts of new lengths 17..120, one at a time (--seed-lengths:
                the first N only)
  hf_static     transformers' StaticCache, fresh per call (it allocates for
                its first call's batch), model.generate; dynamo's recompile
                limit raised to 64 so it can finish
  statickv      one statickv.hf.StaticKVCache for both scenarios' calls,
                statickv.hf.generate, batch buckets {1, 2, 4}, the default
                recompile limit (8); one run per prompt-bucket set of
                --seed-prompt-buckets (default "32,64,96,128;32": four
                length buckets, then one 32-token chunk that prefills every
                length in chunks, so one prefill graph serves them all)
Reported: total seconds, per-request seconds (the first request at each new
length), graphs compiled, graph breaks, and whether the tokens are equal.

Writes --json; prints a table. Python: the .venv of scripts/setup.sh (torch,
transformers, safetensors). Offline: nothing is downloaded.

This file is the command line; each part is a module of hf_compare_parts/
(serve, new_lengths, smollm2, roofline, seeds, and what they share: common,
batches).
"""

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

# The parts, one module each (hf_compare_parts/__init__.py). common goes first:
# it sets transformers offline before torch and transformers load. hf_serving.py,
# gemma3_hybrid.py and http_serve.py import DTYPES, TokenTimes, checkpoint,
# cpu_model and load_hf from here.
from hf_compare_parts.common import (  # noqa: F401  (some are imported from here)
    DTYPES, TokenTimes, checkpoint, cpu_model, hf_config, load_hf,
)
from hf_compare_parts.new_lengths import new_lengths_part
from hf_compare_parts.roofline import roofline
from hf_compare_parts.seeds import seed_scenarios
from hf_compare_parts.serve import serve_shape
from hf_compare_parts.smollm2 import CHAT_TEXT, real_model

import torch  # noqa: E402
import transformers  # noqa: E402


def parse_args():
    """The command line, checked: (args, the set of --parts)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", help="smollm2 part: the converted SmolLM2 checkpoint")
    parser.add_argument("--demo", help="smollm2 part: statickv-demo")
    parser.add_argument("--batches", default="1,8", help="--checkpoint: batch sizes")
    parser.add_argument("--chat-text", default=CHAT_TEXT, help="--checkpoint: the user message")
    parser.add_argument("--compile", action="store_true",
                        help="--checkpoint: also hf-static with a torch.compile'd forward")
    parser.add_argument("--exe", default="", help="statickv-serve (the serve part)")
    parser.add_argument("--parts", default="serve", help="comma-separated: serve (statickv-serve "
                        "against hf), seeds (the two seed scenarios through the Python package), "
                        "smollm2 (the real model: --checkpoint, --demo), roofline (decode "
                        "tokens/s at --roofline-batches: hf static compiled vs statickv plain "
                        "and fused; --shapes, --demo)")
    parser.add_argument("--roofline-batches", default="1,16", help="roofline: batch sizes")
    parser.add_argument("--shapes", default="tiny", help="comma-separated: tiny, llama-3.2-1b")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default=None, help="fp32, fp16, bf16 (default fp32 cpu, bf16 cuda)")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=2048, help="statickv cache capacity")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads, both sides (0: default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default="results/hf", help="checkpoints are kept here")
    parser.add_argument("--new-lengths", default="", help="CUDA: prompt lengths for first-request times")
    parser.add_argument("--no-compile", action="store_true", help="CUDA: skip the torch.compile runs")
    parser.add_argument("--compile-backend", default="inductor",
                        help="seeds: torch.compile backend (inductor; eager or aot_eager to test)")
    parser.add_argument("--seed-prompt-buckets", default="32,64,96,128;32",
                        type=lambda v: [[int(n) for n in b.split(",")] for b in v.split(";") if b],
                        help="seeds: statickv's prompt buckets, one run per ';'-separated set")
    parser.add_argument("--seed-lengths", type=int, default=16, choices=range(1, 17),
                        metavar="1..16", help="seeds: how many of issue 29151's 16 prompt "
                        "lengths to run, shortest first (default 16; fewer to test the plumbing)")
    parser.add_argument("--deadline-s", type=float, default=0, help="stop optional parts after this")
    parser.add_argument("--json", default="", help="write results here")
    parser.add_argument("--cuda-parts-on-cpu", action="store_true",
                        help="testing: run the torch.compile and new-length parts on the CPU too")
    args = parser.parse_args()
    parts = {p for p in args.parts.split(",") if p}
    if not parts <= {"serve", "seeds", "smollm2", "roofline"}:
        parser.error(f"--parts: expected serve, seeds, smollm2 and/or roofline but got {args.parts}")
    if "roofline" in parts and not args.demo:
        parser.error("--demo: expected statickv-demo for the roofline part")
    if "serve" in parts and not args.exe:
        parser.error("--exe: expected statickv-serve for the serve part")
    if "smollm2" in parts and not (args.checkpoint and args.demo):
        parser.error("--checkpoint, --demo: expected both for the smollm2 part")
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    return args, parts


def start_results(args, parts, device, mode):
    """Prints the run's header line; the results' JSON before any part."""
    print(f"hf_compare: transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{args.dtype} on {args.device}, "
          f"{'a chat prompt' if parts == {'smollm2'} else f'prompt {args.prompt_len} tokens'}, "
          f"{args.new_tokens} new tokens, {args.rounds} rounds, "
          f"{torch.get_num_threads()} CPU threads; statickv mode {mode}", flush=True)
    return {
        "benchmark": "hf_compare",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "environment": {
            "libtorch": torch.__version__.split("+")[0], "torch_python": torch.__version__,
            "transformers": transformers.__version__, "device": args.device,
            "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
            "cpu": cpu_model(), "cpu_threads": torch.get_num_threads(),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        },
        "dtype": args.dtype, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
        "rounds": args.rounds, "statickv_mode": mode, "shapes": [],
    }  # fmt: skip


def shape_parts(args, parts, shape, results, run, save):
    """The seeds and serve parts (and the serve part's new lengths) for one
    shape, on its seeded checkpoint and prompt."""
    device = run["device"]
    directory = checkpoint(args.workdir, shape, args.seed, device)
    vocab = hf_config(shape).vocab_size
    prompt = torch.randint(0, vocab, (args.prompt_len,),
                           generator=torch.Generator().manual_seed(args.seed + 1)).tolist()
    entry = {"shape": shape}
    results["shapes"].append(entry)
    if "seeds" in parts:
        seed_scenarios(args, directory, device, run["dtype"], entry, save)
    if "serve" not in parts:
        return
    serve_shape(args, shape, directory, prompt, entry, run, save)
    new_lengths_part(args, shape, directory, entry, run, save)
    if device.type == "cuda":
        torch.cuda.empty_cache()


def main():
    args, parts = parse_args()
    started = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    run = {
        "device": device, "dtype": DTYPES[args.dtype],
        "deadline": started + args.deadline_s if args.deadline_s > 0 else float("inf"),
        "cuda": device.type == "cuda" or args.cuda_parts_on_cpu,
        "mode": "bucketed" if device.type == "cuda" else "eager",
    }  # fmt: skip
    transformers.utils.logging.disable_progress_bar()
    results = start_results(args, parts, device, run["mode"])

    def save():  # after every part, so a run stopped by a timeout keeps what finished
        results["wall_s"] = time.perf_counter() - started
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(results, indent=1) + "\n")

    if "smollm2" in parts:
        real_model(args, results, save)
    if "roofline" in parts:
        for shape in [s for s in args.shapes.split(",") if s]:
            roofline(args, shape, results, save, run["deadline"])
    for shape in [s for s in args.shapes.split(",") if s and parts & {"serve", "seeds"}]:
        shape_parts(args, parts, shape, results, run, save)
    save()
    if args.json:
        print(f"wrote {args.json}")


if __name__ == "__main__":
    sys.exit(main())
