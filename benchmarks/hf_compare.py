#!/usr/bin/env python3
"""statickv against what users run today: Hugging Face transformers' static cache.

usage: hf_compare.py --exe BUILD/apps/statickv-serve [options]

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
                (torch.compile + CUDA graphs) and runs prefill eagerly. (An
                earlier version wrapped model.forward in torch.compile itself;
                on the H200 with transformers 5.17 that failed: the static
                cache is created lazily inside the first compiled call, so its
                tensors were CUDA-graph outputs overwritten by the next run.)
  new lengths   for each of --new-lengths (prompt lengths not seen before),
                the time to the first token of the first request, from a
                fresh hf-compile model and a fresh statickv server: what a
                new prompt length costs (recompilation vs a bucket capture)

Writes --json; prints a table. Python: the .venv of scripts/setup.sh (torch,
transformers, safetensors). Offline: nothing is downloaded.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import CompileConfig, GenerationConfig, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.generation.streamers import BaseStreamer  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def hf_config(shape):
    """Transformers' LlamaConfig for statickv's named shapes (reference/src/checkpoint.cpp)."""
    if shape == "tiny":
        return LlamaConfig(
            vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            bos_token_id=None, eos_token_id=None, pad_token_id=None,
        )  # fmt: skip
    if shape == "llama-3.2-1b":
        return LlamaConfig(
            vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=32, num_key_value_heads=8, head_dim=64,
            max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=True,
            rope_parameters={
                "rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            # No EOS: every request runs its full new_tokens on both sides.
            bos_token_id=None, eos_token_id=None, pad_token_id=None,
        )  # fmt: skip
    raise SystemExit(f"--shapes: expected tiny or llama-3.2-1b but got {shape}")


def checkpoint(workdir, shape, seed, device):
    """The shape's checkpoint directory, made once (random weights, seeded,
    stored in bf16: half the disk; both sides load the same rounded weights
    into the compute dtype)."""
    dtype_name = "bf16"
    directory = Path(workdir) / f"{shape}-seed{seed}"
    if (directory / "config.json").exists() and any(directory.glob("*.safetensors")):
        return directory
    start = time.perf_counter()
    torch.manual_seed(seed)
    config = hf_config(shape)
    with torch.device(device):  # random init on the GPU when there is one: much faster
        model = LlamaForCausalLM(config).to(DTYPES[dtype_name]).eval()
    model.save_pretrained(directory, safe_serialization=True)
    print(f"  saved {shape} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
          f"{dtype_name}) to {directory} in {time.perf_counter() - start:.1f} s", flush=True)
    return directory


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class TokenTimes(BaseStreamer):
    """Host time of every streamer.put: the prompt, then each new token
    (generate copies each token to the host first, so the device is done)."""

    def __init__(self):
        self.times = []

    def put(self, value):
        self.times.append(time.perf_counter())

    def end(self):
        pass


def load_hf(directory, dtype, device, compiled):
    model = LlamaForCausalLM.from_pretrained(directory, dtype=dtype, attn_implementation="sdpa")
    model = model.to(device).eval()
    model.statickv_compiled = compiled  # read by hf_generate
    return model


def compile_config(device):
    """transformers' auto-compile settings for the hf-compile variant."""
    config = CompileConfig(fullgraph=True, mode="reduce-overhead")
    if device.type != "cuda":
        # --cuda-parts-on-cpu: transformers only auto-compiles on accelerators
        # unless told otherwise (a private switch of its own tests).
        config._compile_all_devices = True
    return config


def hf_generate(model, prompt, new_tokens, device):
    """One greedy request through HF's static cache: (tokens, first_token_s, decode_s)."""
    compiled = getattr(model, "statickv_compiled", False)
    config = GenerationConfig(
        do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
        cache_implementation="static", disable_compile=not compiled,
        compile_config=compile_config(device) if compiled else None,
        eos_token_id=None, bos_token_id=None, pad_token_id=0,
    )  # fmt: skip
    ids = torch.tensor([prompt], dtype=torch.long, device=device)
    streamer = TokenTimes()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config,
                             streamer=streamer)
    t = streamer.times
    tokens = out[0, len(prompt):].tolist()
    first = t[1] - start
    decode = t[-1] - t[1] if len(t) > 2 else 0.0
    return tokens, first, decode


class Server:
    """statickv-serve over JSON lines, one request at a time (one cache row;
    prefill in one pass up to 1024 tokens; every bucket captured at start)."""

    def __init__(self, exe, directory, device, dtype, mode, max_len, threads):
        command = [str(exe), "--checkpoint", str(directory), "--device", device, "--dtype", dtype,
                   "--cache", "static", "--max-batch", "1", "--max-len", str(max_len),
                   "--prefill-chunk", str(min(max_len, 1024))]
        if mode == "eager":
            command.append("--eager")
        if threads:
            command += ["--threads", str(threads)]
        self.command = command
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, bufsize=1)
        self.requests = 0

    def _read(self):
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"statickv-serve exited ({self.process.wait()}): "
                             f"{' '.join(self.command)}")
        reply = json.loads(line)
        if "error" in reply:
            raise SystemExit(f"statickv-serve: {reply['error']}")
        return reply

    def generate(self, prompt, new_tokens):
        self.requests += 1  # "stop": [] generates every token (no eos stop)
        self.process.stdin.write(json.dumps({"id": self.requests, "prompt": prompt,
                                             "max_new_tokens": new_tokens, "stop": []}) + "\n")
        self.process.stdin.flush()
        reply = self._read()
        rate, later = reply["decode_tokens_per_s"], len(reply["tokens"]) - 1
        reply["first_token_s"] = reply["ttft_s"]
        reply["decode_s"] = later / rate if rate > 0 else 0.0
        return reply

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()  # end of input: the server drains and exits
            self.process.wait(timeout=60)


def summary(values):
    values = sorted(values)
    if not values:
        return None

    def at(f):
        return values[min(len(values) - 1, int(f * (len(values) - 1) + 0.5))]

    return {"median": statistics.median(values), "p10": at(0.1), "p90": at(0.9)}


def text(s, scale=1.0, digits=2):
    if s is None:
        return "-"
    return f"{s['median'] * scale:.{digits}f} [{s['p10'] * scale:.{digits}f}, {s['p90'] * scale:.{digits}f}]"


def side_by_side(name, hf_model, server, prompt, new_tokens, rounds, device):
    """Interleaved rounds of hf and statickv on the same prompt."""
    for _ in range(2):  # warm-up: kernels, thread pools, captures of the buckets used
        hf_generate(hf_model, prompt, new_tokens, device)
        server.generate(prompt, new_tokens)
    rows = {"hf": [], "statickv": []}
    same = []
    for r in range(rounds):
        order = ("hf", "statickv") if r % 2 == 0 else ("statickv", "hf")
        got = {}
        for who in order:
            if who == "hf":
                tokens, first, decode = hf_generate(hf_model, prompt, new_tokens, device)
            else:
                reply = server.generate(prompt, new_tokens)
                tokens, first, decode = reply["tokens"], reply["first_token_s"], reply["decode_s"]
            got[who] = tokens
            rows[who].append((first, decode / max(1, new_tokens - 1)))
        same.append(got["hf"] == got["statickv"])
    out = {"name": name, "tokens_identical_rounds": sum(same), "rounds": rounds}
    for who in rows:
        out[who] = {"first_token_s": summary([f for f, _ in rows[who]]),
                    "decode_s_per_token": summary([d for _, d in rows[who]])}
    out["ratio_first_token"] = summary(
        [s[0] / h[0] for s, h in zip(rows["statickv"], rows["hf"])])
    out["ratio_decode"] = summary([s[1] / h[1] for s, h in zip(rows["statickv"], rows["hf"])])
    out["hf_tokens"], out["statickv_tokens"] = got["hf"], got["statickv"]
    return out


def print_side_by_side(result, hf_name="hf"):
    print(f"\n  {result['name']}: tokens identical in {result['tokens_identical_rounds']}"
          f"/{result['rounds']} rounds")
    print(f"  {'':<10} {'first token ms [p10, p90]':>32} {'decode ms/token [p10, p90]':>32}")
    for key, label in (("hf", hf_name), ("statickv", "statickv")):
        r = result[key]
        print(f"  {label:<10} {text(r['first_token_s'], 1e3):>32} "
              f"{text(r['decode_s_per_token'], 1e3):>32}")
    print(f"  {'sk / hf':<10} {text(result['ratio_first_token'], 1, 3):>32} "
          f"{text(result['ratio_decode'], 1, 3):>32}")


def new_lengths(args, directory, device, dtype, lengths, deadline, rows, save):
    """First-request time to the first token for prompt lengths never seen
    before: a fresh compiled HF model vs a fresh statickv graph server.
    Appends a row to `rows` (and saves) after each length."""
    vocab = hf_config(args.shape_for_new_lengths).vocab_size
    gen = torch.Generator().manual_seed(args.seed + 7)
    prompts = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]
    hf_model = load_hf(directory, dtype, device, compiled=True)
    server = Server(args.exe, directory, args.device, args.dtype, "bucketed", args.max_len,
                    args.threads)
    try:
        for n, prompt in zip(lengths, prompts):
            if time.perf_counter() > deadline:
                print(f"  (deadline: stopping before length {n})")
                break
            row = {"prompt_len": n}
            start = time.perf_counter()
            _, first, _ = hf_generate(hf_model, prompt, args.new_tokens, device)
            row["hf_compile_first_token_s"] = first
            row["hf_compile_request_s"] = time.perf_counter() - start
            _, warm, _ = hf_generate(hf_model, prompt, args.new_tokens, device)
            row["hf_compile_warm_first_token_s"] = warm
            start = time.perf_counter()
            reply = server.generate(prompt, args.new_tokens)
            row["statickv_first_token_s"] = reply["first_token_s"]
            row["statickv_request_s"] = time.perf_counter() - start
            row["statickv_warm_first_token_s"] = server.generate(prompt, args.new_tokens)[
                "first_token_s"]
            rows.append(row)
            save()
            print(f"  prompt {n:>5}: first token  hf-compile {first * 1e3:10.1f} ms "
                  f"(warm {warm * 1e3:.1f}), whole request {row['hf_compile_request_s']:.2f} s"
                  f"   statickv {reply['first_token_s'] * 1e3:10.1f} ms "
                  f"(warm {row['statickv_warm_first_token_s'] * 1e3:.1f}), whole request "
                  f"{row['statickv_request_s']:.2f} s (every bucket captured at start)",
                  flush=True)
    finally:
        server.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--exe", required=True, help="statickv-serve")
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
    parser.add_argument("--deadline-s", type=float, default=0, help="stop optional parts after this")
    parser.add_argument("--json", default="", help="write results here")
    parser.add_argument("--cuda-parts-on-cpu", action="store_true",
                        help="testing: run the torch.compile and new-length parts on the CPU too")
    args = parser.parse_args()
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    started = time.perf_counter()
    deadline = started + args.deadline_s if args.deadline_s > 0 else float("inf")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    cuda = device.type == "cuda" or args.cuda_parts_on_cpu
    transformers.utils.logging.disable_progress_bar()
    mode = "bucketed" if device.type == "cuda" else "eager"

    print(f"hf_compare: transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{args.dtype} on {args.device}, prompt {args.prompt_len} tokens, "
          f"{args.new_tokens} new tokens, {args.rounds} rounds, "
          f"{torch.get_num_threads()} CPU threads; statickv mode {mode}", flush=True)
    results = {
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
    def save():  # after every part, so a run stopped by a timeout keeps what finished
        results["wall_s"] = time.perf_counter() - started
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(results, indent=1) + "\n")

    for shape in [s for s in args.shapes.split(",") if s]:
        directory = checkpoint(args.workdir, shape, args.seed, device)
        vocab = hf_config(shape).vocab_size
        prompt = torch.randint(0, vocab, (args.prompt_len,),
                               generator=torch.Generator().manual_seed(args.seed + 1)).tolist()
        entry = {"shape": shape}
        results["shapes"].append(entry)
        hf_model = load_hf(directory, dtype, device, compiled=False)
        server = Server(args.exe, directory, args.device, args.dtype, mode, args.max_len,
                        args.threads)
        try:
            entry["eager"] = side_by_side(f"{shape}: hf static (eager) vs statickv ({mode})",
                                          hf_model, server, prompt, args.new_tokens, args.rounds,
                                          device)
            print_side_by_side(entry["eager"])
            save()
            del hf_model
            if cuda and not args.no_compile and time.perf_counter() < deadline:
                compiled = load_hf(directory, dtype, device, compiled=True)
                entry["compiled"] = side_by_side(
                    f"{shape}: hf static + torch.compile(reduce-overhead) vs statickv graphs",
                    compiled, server, prompt, args.new_tokens, args.rounds, device)
                print_side_by_side(entry["compiled"], "hf-compile")
                save()
                del compiled
        finally:
            server.close()
        if cuda and args.new_lengths and not args.no_compile and time.perf_counter() < deadline:
            lengths = [int(n) for n in args.new_lengths.split(",")]
            args.shape_for_new_lengths = shape
            print(f"\n  {shape}: first request at new prompt lengths {lengths}")
            torch._dynamo.reset()
            entry["new_lengths"] = []
            new_lengths(args, directory, device, dtype, lengths, deadline, entry["new_lengths"],
                        save)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    save()
    if args.json:
        print(f"wrote {args.json}")


if __name__ == "__main__":
    sys.exit(main())
