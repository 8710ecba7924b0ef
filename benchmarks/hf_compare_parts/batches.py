"""What the smollm2 and roofline parts share: one greedy batch through
transformers or through statickv-demo, interleaved rounds of every variant
at one batch size, and their table."""

import json
import subprocess
import time
from pathlib import Path

import torch
from transformers import GenerationConfig

from .common import TokenTimes, summary, text

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
