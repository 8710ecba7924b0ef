"""--parts serve: statickv-serve against transformers' static cache on the
same checkpoint, interleaved rounds (hf_compare.py's docstring)."""

import json
import subprocess
import time

import torch
from transformers import GenerationConfig

from .common import TokenTimes, compile_config, load_hf, summary, text

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


def serve_shape(args, shape, directory, prompt, entry, run, save):
    """The serve part for one shape: hf static (eager) vs statickv, then on
    CUDA hf static compiled vs statickv's graphs, on one statickv-serve.
    run: the run's settings (device, dtype, mode, cuda, deadline)."""
    device, mode = run["device"], run["mode"]
    hf_model = load_hf(directory, run["dtype"], device, compiled=False)
    server = Server(args.exe, directory, args.device, args.dtype, mode, args.max_len,
                    args.threads)
    try:
        entry["eager"] = side_by_side(f"{shape}: hf static (eager) vs statickv ({mode})",
                                      hf_model, server, prompt, args.new_tokens, args.rounds,
                                      device)
        print_side_by_side(entry["eager"])
        save()
        del hf_model
        if run["cuda"] and not args.no_compile and time.perf_counter() < run["deadline"]:
            compiled = load_hf(directory, run["dtype"], device, compiled=True)
            entry["compiled"] = side_by_side(
                f"{shape}: hf static + torch.compile(reduce-overhead) vs statickv graphs",
                compiled, server, prompt, args.new_tokens, args.rounds, device)
            print_side_by_side(entry["compiled"], "hf-compile")
            save()
            del compiled
    finally:
        server.close()
