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
  seed_29151    16 prompts of new lengths 17..120, one at a time
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
from transformers import (  # noqa: E402
    CompileConfig,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    StaticCache,
)
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
    model = LlamaForCausalLM.from_pretrained(directory, dtype=dtype, attn_implementation="sdpa",
                                             use_kernels=False)
    model = model.to(device).eval()
    model.statickv_compiled = compiled  # read by hf_generate
    return model


def compile_config(device, backend="inductor"):
    """transformers' auto-compile settings for the hf-compile variant: the
    one place compilation is set up for transformers' generate()."""
    if backend == "inductor":
        config = CompileConfig(fullgraph=True, mode="reduce-overhead")
    else:  # eager / aot_eager: checks the plumbing quickly (modes are Inductor's)
        config = CompileConfig(fullgraph=True, backend=backend, mode=None)
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
                   "--prefill-chunk", str(min(max_len, 1024)),
                   "--no-prefix-cache"]  # every round repeats the prompt: prefill it each time
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


# ---------------------------------------------------------------------------
# A real model: SmolLM2-135M-Instruct (--checkpoint, --demo)

CHAT_TEXT = (
    "A key-value cache keeps the keys and values of every token a transformer has already "
    "seen, so that each new token attends to them without recomputing them. Explain in a few "
    "sentences why a cache whose buffers are allocated once, at a fixed size, suits CUDA graphs, "
    "and what it costs when the batch is smaller than the buffers."
)


def chat_ids(tokenizer, text):
    return tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                         add_generation_prompt=True, return_dict=True)["input_ids"]


def hf_batch(model, prompt, batch, new_tokens, cache, device, compiled=None):
    """One greedy batch of `batch` copies of `prompt` through transformers:
    (rows' new ids, prefill seconds (to the first token), decode seconds).
    compiled: a CompileConfig for transformers' own compiled decode step
    (static cache only), else eager."""
    config = GenerationConfig(
        do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
        cache_implementation=cache, disable_compile=compiled is None, compile_config=compiled,
        eos_token_id=None, bos_token_id=None, pad_token_id=0,
    )  # fmt: skip
    ids = torch.tensor([prompt] * batch, dtype=torch.long, device=device)
    streamer = TokenTimes()
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config,
                             streamer=streamer)
    t = streamer.times  # the prompt, then one put per new token
    return out[:, len(prompt):].tolist(), t[1] - start, t[-1] - t[1]


def statickv_batch(args, prompt, batch, new_tokens, scratch, checkpoint=None, path="plain"):
    """The same batch through statickv-demo (StaticCache, its own warm-up
    call first; --path plain or fused): (rows' new ids, prefill seconds,
    decode seconds)."""
    ids = ",".join(str(i) for i in prompt)
    command = [args.demo, "--checkpoint", str(checkpoint or args.checkpoint), "--path", path,
               "--device", args.device,
               "--dtype", args.dtype, "--cache", "static", "--no-compare", "--ignore-eos",
               "--max-new-tokens", str(new_tokens), "--prompt-ids", ";".join([ids] * batch),
               "--json", str(scratch)]
    if args.threads:
        command += ["--threads", str(args.threads)]
    if args.device == "cpu":
        command.append("--eager")  # exact shapes: on a CPU, buckets would only add padding
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... exited {run.returncode}: {run.stderr}")
    reply = json.loads(Path(scratch).read_text())
    return reply["tokens"], reply["prefill_seconds"], reply["decode_seconds"]


def rates(prompt_len, batch, new_tokens, prefill_s, decode_s):
    """(prefill tokens/s, decode tokens/s) of one batch."""
    return batch * prompt_len / prefill_s, batch * (new_tokens - 1) / decode_s


def real_model_batch(args, variants, prompt, batch, scratch):
    """Interleaved rounds of every variant at one batch size."""
    per = {name: [] for name in variants}
    tokens = {}
    for name, run in variants.items():  # warm-up (a compile happens here)
        start = time.perf_counter()
        run(batch)
        print(f"    warm-up {name:<18} {time.perf_counter() - start:7.1f} s", flush=True)
    for r in range(args.rounds):
        names = list(variants)
        for name in names[r % len(names):] + names[:r % len(names)]:
            got, prefill_s, decode_s = variants[name](batch)
            tokens[name] = got
            per[name].append(rates(len(prompt), batch, args.new_tokens, prefill_s, decode_s))
    out = {"batch": batch, "prompt_len": len(prompt), "variants": {}}
    for name, values in per.items():
        out["variants"][name] = {"prefill_tokens_per_s": summary([p for p, _ in values]),
                                 "decode_tokens_per_s": summary([d for _, d in values])}
    for name in variants:
        if name == "statickv":
            continue
        sk, hf = per["statickv"], per[name]
        out[f"statickv_over_{name}"] = {
            "prefill": summary([s[0] / h[0] for s, h in zip(sk, hf)]),
            "decode": summary([s[1] / h[1] for s, h in zip(sk, hf)]),
            "tokens_identical": tokens[name] == tokens["statickv"]}
    return out


def print_real_model_batch(result):
    print(f"\n  batch {result['batch']}, prompt {result['prompt_len']} tokens "
          f"(tokens/s, median [p10, p90])")
    print(f"  {'':<24} {'prefill':>28} {'decode':>28}")
    for name, v in result["variants"].items():
        print(f"  {name:<24} {text(v['prefill_tokens_per_s'], 1, 0):>28} "
              f"{text(v['decode_tokens_per_s'], 1, 1):>28}")
    for key, v in result.items():
        if key.startswith("statickv_over_"):
            print(f"  {'sk / ' + key[len('statickv_over_'):]:<24} {text(v['prefill'], 1, 2):>28} "
                  f"{text(v['decode'], 1, 2):>28}   tokens identical: {v['tokens_identical']}")


def real_model(args, results, save):
    """The smollm2 scenario (module docstring)."""
    from transformers import AutoTokenizer

    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    prompt = chat_ids(AutoTokenizer.from_pretrained(args.checkpoint), args.chat_text)
    model = LlamaForCausalLM.from_pretrained(args.checkpoint, dtype=dtype,
                                             attn_implementation="sdpa",
                                             use_kernels=False).to(device).eval()
    scratch = Path(args.workdir) / "statickv-demo.json"
    scratch.parent.mkdir(parents=True, exist_ok=True)
    variants = {
        "hf-dynamic": lambda b: hf_batch(model, prompt, b, args.new_tokens, None, device),
        "hf-static": lambda b: hf_batch(model, prompt, b, args.new_tokens, "static", device),
        "statickv": lambda b: statickv_batch(args, prompt, b, args.new_tokens, scratch),
    }
    if args.compile:
        compiled = LlamaForCausalLM.from_pretrained(args.checkpoint, dtype=dtype,
                                                    attn_implementation="sdpa",
                                                    use_kernels=False).to(device).eval()
        compiled.forward = torch.compile(compiled.forward, fullgraph=True, dynamic=False)
        variants["hf-static-compile"] = lambda b: hf_batch(compiled, prompt, b, args.new_tokens,
                                                           "static", device)
    results["scenario"] = "smollm2"
    results["checkpoint"] = Path(args.checkpoint).name
    results["batches"] = []
    for batch in [int(b) for b in args.batches.split(",")]:
        results["batches"].append(real_model_batch(args, variants, prompt, batch, scratch))
        print_real_model_batch(results["batches"][-1])
        save()
def recompiles_at_new_length(model, prompt, new_tokens, device, compiled):
    """Graphs dynamo compiles for one request at a prompt length not seen
    before (the compiled model already warm at len(prompt))."""
    before = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    longer = (prompt * 2)[:len(prompt) + 37]
    hf_batch(model, longer, 1, new_tokens, "static", device, compiled)
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"]) - before


def roofline(args, shape, results, save):
    """Decode tokens/s at each --roofline-batches: transformers' static cache
    with its compiled decode step (compile_config, as its docs say) against
    statickv-demo on the plain and the fused path; then dynamo's recompiles
    for a new prompt length (issue 15)."""
    device = torch.device(args.device)
    directory = checkpoint(args.workdir, shape, args.seed, device)
    vocab = hf_config(shape).vocab_size
    prompt = torch.randint(1, vocab, (args.prompt_len,),
                           generator=torch.Generator().manual_seed(args.seed + 1)).tolist()
    model = load_hf(directory, DTYPES[args.dtype], device, compiled=True)
    compiled = compile_config(device, args.compile_backend)
    scratch = Path(args.workdir) / "statickv-demo-roofline.json"
    scratch.parent.mkdir(parents=True, exist_ok=True)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    variants = {
        "hf-compile": lambda b: hf_batch(model, prompt, b, args.new_tokens, "static", device,
                                         compiled),
        "statickv": lambda b: statickv_batch(args, prompt, b, args.new_tokens, scratch, directory),
        "statickv-fused": lambda b: statickv_batch(args, prompt, b, args.new_tokens, scratch,
                                                   directory, "fused"),
    }
    entry = {"shape": shape, "batches": []}
    results.setdefault("roofline", []).append(entry)
    for batch in [int(b) for b in args.roofline_batches.split(",")]:
        entry["batches"].append(real_model_batch(args, variants, prompt, batch, scratch))
        print_real_model_batch(entry["batches"][-1])
        save()
    entry["hf_recompiles_per_new_length"] = recompiles_at_new_length(
        model, prompt, args.new_tokens, device, compiled)
    print(f"  {shape}: dynamo compiled {entry['hf_recompiles_per_new_length']} new graph(s) for "
          f"a new prompt length", flush=True)
    save()


SEED_BATCHES = [4, 2, 3, 1]  # transformers PR 37394 / issue 42454
SEED_LENGTHS = [17 + 7 * i for i in range(15)] + [120]  # issue 29151: 16 new lengths


def compile_forward(model, device, backend):
    """What a user writes: the forward compiled at static shapes (Inductor;
    CUDA graphs too on a GPU)."""
    mode = "reduce-overhead" if device.type == "cuda" and backend == "inductor" else None
    model.forward = torch.compile(model.forward, backend=backend, dynamic=False, fullgraph=True,
                                  mode=mode)
    return model


def hf_static_request(model, ids, new_tokens, max_len):
    """transformers' StaticCache, fresh per call: it allocates for its first
    update's batch and cannot serve another one afterwards."""
    text = model.config
    cache = StaticCache(config=text, max_cache_len=max_len)
    cache.early_initialization(ids.shape[0], text.num_key_value_heads, text.head_dim,
                               model.dtype, ids.device)
    return model.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                          max_new_tokens=new_tokens, do_sample=False, disable_compile=True,
                          pad_token_id=0)


def timed_requests(request, inputs, device):
    """Runs the requests in order from a clean dynamo state: total seconds
    (compiles included), per-request seconds, graphs compiled, outputs."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    seconds, outputs = [], []
    start = time.perf_counter()
    for ids, new_tokens in inputs:
        t = time.perf_counter()
        with torch.no_grad():
            outputs.append(request(ids.to(device), new_tokens).cpu())
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - t)
    total = time.perf_counter() - start
    graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    return {"total_s": total, "request_s": seconds, "graphs": graphs, "graph_breaks": breaks,
            "outputs": outputs}


def seed_inputs(vocab, seed, prompt_len, new_tokens):
    gen = torch.Generator().manual_seed(seed)
    batches = [(torch.randint(1, vocab, (b, prompt_len), generator=gen), new_tokens)
               for b in SEED_BATCHES]
    lengths = [(torch.randint(1, vocab, (1, n), generator=gen), new_tokens) for n in SEED_LENGTHS]
    return {"seed_37394": batches, "seed_29151": lengths}


def seed_scenarios(args, directory, device, dtype, entry, save):
    """The two seed scenarios end to end, compile time included: transformers'
    StaticCache (fresh per call) against one statickv.hf.StaticKVCache, both
    with the forward compiled by the user."""
    max_len = 128 + args.new_tokens  # the largest prompt bucket, then the new tokens
    inputs = seed_inputs(hf_config(entry["shape"]).vocab_size, args.seed, 48, args.new_tokens)
    # transformers recompiles per batch size and prompt length: past dynamo's
    # default limit (8) it would fail, so it gets room to finish.
    torch._dynamo.config.recompile_limit = 64
    # Cold compiles on both sides: Inductor's on-disk caches would hand a
    # rerun the graphs an earlier run compiled.
    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False
    hf = compile_forward(load_hf(directory, dtype, device, compiled=False), device,
                         args.compile_backend)
    hf_runs = {name: timed_requests(lambda ids, n: hf_static_request(hf, ids, n, max_len), rows,
                                    device) for name, rows in inputs.items()}
    del hf
    torch._dynamo.config.recompile_limit = 8
    hf_ids = {name: run.pop("outputs") for name, run in hf_runs.items()}
    entry["seeds"] = {name: {"hf_static": hf_runs[name], "statickv": {}} for name in inputs}
    for buckets in args.seed_prompt_buckets:
        sk_runs = statickv_seed_runs(args, directory, device, dtype, max_len, buckets, inputs)
        label = ",".join(map(str, buckets))
        for name in inputs:
            entry["seeds"][name]["statickv"][label] = seed_side(hf_runs[name], hf_ids[name],
                                                                sk_runs[name])
        save()
    print_seeds(entry["seeds"])


def statickv_seed_runs(args, directory, device, dtype, max_len, prompt_buckets, inputs):
    """Both scenarios on one fresh StaticKVCache with these prompt buckets,
    from a clean dynamo state (a fresh model, so nothing compiled carries over)."""
    import statickv.hf  # the Python package (pip install --no-build-isolation .)

    model = compile_forward(load_hf(directory, dtype, device, compiled=False), device,
                            args.compile_backend)
    cache = statickv.hf.StaticKVCache(model.config, max_batch_size=4, max_cache_len=max_len,
                                      device=device, dtype=dtype, batch_buckets=[1, 2, 4],
                                      prompt_buckets=prompt_buckets)
    return {name: timed_requests(
        lambda ids, n: statickv.hf.generate(model, cache, ids, max_new_tokens=n), rows, device)
        for name, rows in inputs.items()}


def seed_side(hf, hf_ids, sk):
    """One statickv run against transformers' run of the same requests."""
    sk["same_tokens"] = all(torch.equal(a, b) for a, b in zip(hf_ids, sk.pop("outputs")))
    sk["speedup_total"] = hf["total_s"] / sk["total_s"]
    return sk


def print_seeds(rows):
    print("\n  seed scenarios (compile time included)      total s  graphs  breaks", flush=True)
    for name, row in rows.items():
        sides = [("hf_static", row["hf_static"])]
        sides += [(f"statickv buckets {label}", r) for label, r in row["statickv"].items()]
        for side, r in sides:
            print(f"  {name:11s} {side:28s} {r['total_s']:8.1f}  {r['graphs']:6d}  "
                  f"{r['graph_breaks']:6d}")
        for label, r in row["statickv"].items():
            print(f"  {name:11s} statickv (buckets {label}) faster in total: "
                  f"{r['speedup_total']:.1f}x; same tokens: {r['same_tokens']}")


def main():
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
          f"{args.dtype} on {args.device}, "
          f"{'a chat prompt' if parts == {'smollm2'} else f'prompt {args.prompt_len} tokens'}, "
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

    if "smollm2" in parts:
        real_model(args, results, save)
    if "roofline" in parts:
        for shape in [s for s in args.shapes.split(",") if s]:
            roofline(args, shape, results, save)
    for shape in [s for s in args.shapes.split(",") if s and parts & {"serve", "seeds"}]:
        directory = checkpoint(args.workdir, shape, args.seed, device)
        vocab = hf_config(shape).vocab_size
        prompt = torch.randint(0, vocab, (args.prompt_len,),
                               generator=torch.Generator().manual_seed(args.seed + 1)).tolist()
        entry = {"shape": shape}
        results["shapes"].append(entry)
        if "seeds" in parts:
            seed_scenarios(args, directory, device, dtype, entry, save)
        if "serve" not in parts:
            continue
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
