#!/usr/bin/env python3
"""statickv-serve --http against `transformers serve`: one OpenAI-compatible trace.

usage: http_serve.py --checkpoint DIR --serve BUILD/apps/statickv-serve
                     [--requests 32] [--rate 2.0] [--seed 0] [--max-tokens 32]
                     [--prompt-tokens 64-256] [--threads N] [--max-batch 8] [--max-len 1024]
                     [--prefill-chunk N]
                     [--transformers-modes continuous,sequential] [--skip-transformers]
                     [--skip-statickv] [--make-tiny] [--json OUT]

DIR is a transformers checkpoint (save_pretrained: config.json, safetensors)
with a tokenizer (tokenizer.json) and a chat template (chat_template.jinja or
tokenizer_config.json's), e.g. SmolLM2-135M-Instruct from
tools/smollm2/convert.py. --make-tiny first writes a tiny random Llama there
(2 layers, hidden 64, seeded) with a byte-level BPE tokenizer trained on
--text and a ChatML template, for a plumbing check in seconds; it has no eos,
so every request runs its full --max-tokens.

The trace, the same for every server: --requests chat requests
(POST /v1/chat/completions, one user message), Poisson arrivals at --rate
per second from --seed; request i's message is a slice of --text (default
docs/design.md) of a length drawn uniformly from --prompt-tokens, counted in
the checkpoint's tokenizer before the chat template. Greedy (temperature 0),
max_tokens = --max-tokens, streamed (stream_options.include_usage). One
client: the openai package's OpenAI client, one thread per request started
at its arrival time, no retries; an error is counted, never retried.

Servers, each started, warmed with 2 requests, run through the trace and
stopped (SIGTERM, then SIGKILL after 30 s) in turn:
  statickv      statickv-serve --checkpoint DIR --http 127.0.0.1:0 --device
                --dtype --max-batch --max-len [--threads]: its continuous
                batching over --max-batch static-cache rows
  transformers  python -m transformers.cli.transformers serve DIR --host
                127.0.0.1 --port P --device --dtype, one run per
                --transformers-modes entry:
                  continuous  --continuous-batching --cb-num-blocks
                              ceil(max-batch * max-len / 256): paged
                              attention, a KV cache of the same tokens as
                              statickv's rows (page size 256)
                  sequential  its default: one model.generate() at a time on
                              one inference thread, a DynamicCache each
                --threads sets OMP_NUM_THREADS / MKL_NUM_THREADS for it.

Measured at the client, per server: requests completed, output tokens
(usage.completion_tokens, else content chunks), wall time from the first
send to the last completion, throughput (output tokens / wall), time to the
first token (the first chunk with non-empty content; p50, p99; nearest rank),
time per output token p50 (per request: first to last content chunk over
tokens - 1), errors. Reported too: how many requests got the same text from
statickv and from transformers (same weights, greedy), and the ratios
statickv / transformers of throughput and TTFT p50.
statickv only, from GET /metrics before and after the trace (the trace's
share: after less before): the HTTP layer's cost per token, the mean of
statickv_http_token_write_seconds (a token produced by the engine to its
bytes written to the socket), against the mean engine step,
statickv_step_seconds, as a percentage (the target: <= 5% of a step).

Below a server's capacity its tok/s is the offered load (printed: requests x
max_tokens over the arrival span) and TTFT/TPOT tell the servers apart; a
high --rate (e.g. 1000: every request at once) measures capacity instead.

Bounds: a server start 180 s (--start-timeout), a request 300 s
(--request-timeout). On a 2-core CPU the client, the server's HTTP threads
and its engine share the cores: quote --threads with the numbers.
Offline: nothing is downloaded (HF_HUB_OFFLINE=1). Python: the .venv of
scripts/setup.sh (transformers, fastapi, uvicorn, openai, tokenizers).
"""

import argparse
import importlib.metadata
import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from datetime import datetime, timezone
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import openai  # noqa: E402
from hf_compare import cpu_model  # noqa: E402  (the machine's name, as the other benchmarks record it)
from tokenizers import Tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
LISTENING = re.compile(r"statickv-serve: listening on http://([^\s:/]+):(\d+)")
DTYPE_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
PAGE_SIZE = 256  # transformers' ContinuousBatchingConfig.page_size default
CHATML = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
          "{{ message['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def fail(flag, message):
    print(f"http_serve.py: {flag}: {message}", file=sys.stderr)
    sys.exit(2)


def version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


# ----- the checkpoint ---------------------------------------------------------------------------


def make_tiny(directory, text, seed):
    """A tiny random Llama (seeded) with a byte-level BPE tokenizer trained on `text`
    and a ChatML chat template; no eos, so generation always runs to max_tokens."""
    import torch
    from tokenizers import decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text.splitlines(), trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token=None,
                                      pad_token=None, unk_token=None)
    wrapped.chat_template = CHATML
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, max_position_embeddings=4096, tie_word_embeddings=False,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.do_sample = False
    model.save_pretrained(directory)
    wrapped.save_pretrained(directory)
    print(f"  wrote a tiny random Llama (vocab {tok.get_vocab_size()}) to {directory}", flush=True)


# ----- the trace --------------------------------------------------------------------------------


def parse_range(value):
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", value.strip())
    if not m:
        fail("--prompt-tokens", f"expected N or A-B (whole numbers) but got {value!r}")
    low, high = int(m.group(1)), int(m.group(2) or m.group(1))
    if low < 1 or high < low:
        fail("--prompt-tokens", f"expected 1 <= A <= B but got {value!r}")
    return low, high


def build_trace(tokenizer, text, count, rate, seed, lengths):
    """count requests: Poisson arrivals at `rate`/s and prompts sliced out of `text`."""
    ids = tokenizer.encode(text).ids
    low, high = lengths
    while len(ids) < 2 * high:  # a short text: repeat it
        ids = ids + ids
    rng = random.Random(seed)
    now, requests = 0.0, []
    for i in range(count):
        if i:
            now += rng.expovariate(rate)
        length = rng.randint(low, high)
        offset = rng.randrange(0, len(ids) - length)
        prompt = tokenizer.decode(ids[offset:offset + length])
        requests.append({"index": i, "arrival_s": now, "prompt_tokens_target": length,
                         "text_offset": offset,
                         "prompt_tokens_text": len(tokenizer.encode(prompt).ids),
                         "prompt": prompt})
    return requests


# ----- servers ----------------------------------------------------------------------------------


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode("utf-8", "replace")


class Server:
    """A server process: its stderr (and stdout) kept in a ring of lines, scanned by
    `ready`; stopped with SIGTERM, then SIGKILL after `grace` seconds."""

    def __init__(self, name, command, env=None):
        self.name, self.command = name, command
        self.lines = deque(maxlen=200)
        self.port = None
        self.started = time.perf_counter()
        # stdin stays open (a pipe) until stop: a server that ends on end of input keeps running
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, bufsize=1,
                                        env=env, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.process.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            m = LISTENING.search(line)
            if m and self.port is None:
                self.port = int(m.group(2))

    def tail(self, n=30):
        return "\n".join(list(self.lines)[-n:])

    def check_alive(self):
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited ({self.process.returncode}) — "
                               f"{' '.join(self.command)}\n{self.tail()}")

    def wait_ready(self, timeout, port=None):
        """statickv: wait for its 'listening on' line, then /health; transformers: /health
        (it loads the model before uvicorn starts listening)."""
        deadline = self.started + timeout
        while time.perf_counter() < deadline:
            self.check_alive()
            p = port or self.port
            if p is not None:
                try:
                    status, _ = http_get(f"http://127.0.0.1:{p}/health", timeout=2)
                    if status == 200:
                        self.port = p
                        self.ready_s = time.perf_counter() - self.started
                        return
                except (urllib.error.URLError, ConnectionError, OSError):
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} was not ready after {timeout:.0f} s\n{self.tail()}")

    def stop(self, grace=30.0):
        """SIGTERM, SIGKILL after `grace` s; (exit status, killed). uvicorn (transformers
        serve) shuts down cleanly on SIGTERM and then re-raises it: its status is -15."""
        killed = False
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                killed = True
                self.process.kill()
                self.process.wait(timeout=10)
        try:
            self.process.stdin.close()
        except OSError:
            pass
        self._reader.join(timeout=5)
        return self.process.returncode, killed


def statickv_command(args):
    command = [str(args.serve), "--checkpoint", str(args.checkpoint), "--http", "127.0.0.1:0",
               "--device", args.device, "--dtype", args.dtype, "--max-batch", str(args.max_batch),
               "--max-len", str(args.max_len)]
    if args.threads:
        command += ["--threads", str(args.threads)]
    if args.prefill_chunk:
        command += ["--prefill-chunk", str(args.prefill_chunk)]
    return command


def transformers_command(args, mode, port):
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve",
               str(args.checkpoint), "--host", "127.0.0.1", "--port", str(port),
               "--device", args.device, "--dtype", DTYPE_NAMES[args.dtype],
               "--log-level", "warning"]
    if mode == "continuous":
        command += ["--continuous-batching",
                    "--cb-num-blocks", str(math.ceil(args.max_batch * args.max_len / PAGE_SIZE))]
    return command


def transformers_env(args):
    # USE_HUB_KERNELS=0: transformers 5.25 loads hub kernels by default, which
    # need the `kernels` package and the network (docs/python.md, "Versions").
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
               TOKENIZERS_PARALLELISM="false", USE_HUB_KERNELS="0")
    if args.threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(args.threads)
    return env


# ----- the client -------------------------------------------------------------------------------


def one_request(client, model, request, max_tokens, timeout):
    """Streams one chat completion; returns its record (times are perf_counter seconds)."""
    record = {"index": request["index"], "sent": time.perf_counter(), "first": None,
              "last": None, "chunks": 0, "completion_tokens": None, "prompt_tokens": None,
              "finish_reason": None, "text": "", "error": None, "done": None}
    pieces = []
    try:
        stream = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": request["prompt"]}],
            max_tokens=max_tokens, temperature=0, stream=True,
            stream_options={"include_usage": True})
        for chunk in stream:
            now = time.perf_counter()
            if chunk.usage is not None:
                record["completion_tokens"] = chunk.usage.completion_tokens
                record["prompt_tokens"] = chunk.usage.prompt_tokens
            for choice in chunk.choices or []:
                content = choice.delta.content if choice.delta else None
                if content:
                    if record["first"] is None:
                        record["first"] = now
                    record["last"] = now
                    record["chunks"] += 1
                    pieces.append(content)
                if choice.finish_reason is not None:
                    record["finish_reason"] = choice.finish_reason
            if now - record["sent"] > timeout:
                stream.close()
                raise TimeoutError(f"not finished {timeout:.0f} s after it was sent")
        if record["finish_reason"] is None:
            raise RuntimeError("the stream ended without a finish_reason")
    except Exception as e:  # noqa: BLE001 — every failure is counted and reported
        record["error"] = f"{type(e).__name__}: {e}"[:500]
    record["done"] = time.perf_counter()
    record["text"] = "".join(pieces)
    return record


def run_trace(base_url, model, trace, max_tokens, timeout):
    """Sends each request of the trace at its arrival time, each from its own thread."""
    client = openai.OpenAI(base_url=base_url, api_key="none", timeout=timeout, max_retries=0)
    records = [None] * len(trace)
    threads = []

    def worker(request):
        records[request["index"]] = one_request(client, model, request, max_tokens, timeout)

    start = time.perf_counter()
    for request in trace:
        wait = start + request["arrival_s"] - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        thread = threading.Thread(target=worker, args=(request,), daemon=True)
        thread.start()
        threads.append(thread)
    deadline = time.perf_counter() + timeout + 30
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.perf_counter()))
    for i, record in enumerate(records):
        if record is None:  # a thread still stuck past every bound
            records[i] = {"index": i, "sent": None, "first": None, "last": None, "chunks": 0,
                          "completion_tokens": None, "prompt_tokens": None,
                          "finish_reason": None, "text": "", "done": None,
                          "error": f"no reply {timeout + 30:.0f} s after the last arrival"}
    client.close()
    return start, records


def warm(base_url, model, trace, max_tokens, timeout):
    """Two requests, one after the other (the trace's first two prompts): untimed."""
    client = openai.OpenAI(base_url=base_url, api_key="none", timeout=timeout, max_retries=0)
    try:
        for request in trace[:2]:
            record = one_request(client, model, dict(request, index=-1), max_tokens, timeout)
            if record["error"]:
                raise RuntimeError(f"warm-up request failed: {record['error']}")
    finally:
        client.close()


def percentile(values, p):
    """Nearest rank, as statickv_bench_serving and hf_serving.py."""
    values = sorted(values)
    if not values:
        return None
    rank = max(1, math.ceil(p * len(values)))
    return values[min(len(values), rank) - 1]


def summarize(start, records, trace):
    ok = [r for r in records if r["error"] is None]
    tokens = [r["completion_tokens"] if r["completion_tokens"] is not None else r["chunks"]
              for r in ok]
    sent = [r["sent"] for r in records if r["sent"] is not None]
    first_send = min(sent) if sent else start
    last_done = max((r["done"] for r in ok), default=first_send)
    wall = last_done - first_send
    ttft = [r["first"] - r["sent"] for r in ok if r["first"] is not None]
    tpot = [(r["last"] - r["first"]) / (n - 1) for r, n in zip(ok, tokens)
            if r["first"] is not None and n >= 2]
    errors = [f"request {r['index']}: {r['error']}" for r in records if r["error"] is not None]
    return {"requests": len(records), "completed": len(ok), "errors": len(errors),
            "error_messages": errors[:20], "output_tokens": sum(tokens),
            "usage_reported": sum(r["completion_tokens"] is not None for r in ok),
            "finish_reasons": {k: sum(r["finish_reason"] == k for r in ok)
                               for k in sorted({r["finish_reason"] for r in ok})},
            "wall_s": wall, "tokens_per_s": sum(tokens) / wall if wall > 0 else None,
            "ttft_p50_s": percentile(ttft, 0.5), "ttft_p99_s": percentile(ttft, 0.99),
            "tpot_p50_s": percentile(tpot, 0.5), "tpot_p99_s": percentile(tpot, 0.99),
            # how late the client sent a request after its arrival time (it kept up?)
            "send_lag_max_s": max((r["sent"] - start - q["arrival_s"] for r, q in
                                   zip(records, trace) if r["sent"] is not None), default=None)}


# ----- statickv's /metrics ----------------------------------------------------------------------


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_metrics(text):
    """Prometheus text -> {name or name{labels}: value} (buckets left out)."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m or m.group(1).endswith("_bucket"):
            continue
        try:
            samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
        except ValueError:
            pass
    return samples


def http_cost(samples, before=None):
    """Means over the trace alone: the samples after it less those before it (after the
    warm-up), when there are both."""
    before = before or {}

    def delta(key):
        return samples.get(key, 0.0) - before.get(key, 0.0)

    def mean(name):
        count = delta(name + "_count")
        return delta(name + "_sum") / count if count > 0 else None

    write = mean("statickv_http_token_write_seconds")
    step = mean("statickv_step_seconds")
    return {"token_write_mean_s": write,
            "token_write_count": delta("statickv_http_token_write_seconds_count"),
            "step_mean_s": step, "step_count": delta("statickv_step_seconds_count"),
            "trace_only": bool(before),
            "percent_of_step": 100 * write / step if write is not None and step else None,
            "target_percent": 5.0}


# ----- one server -------------------------------------------------------------------------------


def measure(args, trace, name, mode, results, save):
    entry = {"server": name, "mode": mode}
    results["servers"].append(entry)
    server = None
    try:
        if name == "statickv":
            server = Server("statickv-serve", statickv_command(args))
            server.wait_ready(args.start_timeout)
            base = f"http://127.0.0.1:{server.port}"
            models = json.loads(http_get(base + "/v1/models")[1])
            model = models["data"][0]["id"]
        else:
            port = free_port()
            server = Server(f"transformers serve ({mode})", transformers_command(args, mode, port),
                            env=transformers_env(args))
            server.wait_ready(args.start_timeout, port=port)
            base = f"http://127.0.0.1:{port}"
            model = str(args.checkpoint)  # a pinned server answers to the name it was given
        entry.update(command=" ".join(server.command), model=model,
                     ready_s=round(server.ready_s, 2))
        print(f"  {name} ({mode}): ready in {server.ready_s:.1f} s on {base}; warming up",
              flush=True)
        warm(base + "/v1", model, trace, args.max_tokens, args.request_timeout)
        before = None
        if name == "statickv":
            try:
                before = parse_metrics(http_get(base + "/metrics")[1])
            except (urllib.error.URLError, OSError, ValueError) as e:
                entry["metrics_error"] = f"before the trace: {type(e).__name__}: {e}"
        print(f"  {name} ({mode}): {len(trace)} requests", flush=True)
        start, records = run_trace(base + "/v1", model, trace, args.max_tokens,
                                   args.request_timeout)
        entry["summary"] = summarize(start, records, trace)
        entry["requests"] = [
            {"index": r["index"],
             "sent_s": None if r["sent"] is None else r["sent"] - start,
             "ttft_s": None if r["first"] is None else r["first"] - r["sent"],
             "done_s": None if r["done"] is None else r["done"] - start,
             "completion_tokens": r["completion_tokens"], "prompt_tokens": r["prompt_tokens"],
             "content_chunks": r["chunks"], "finish_reason": r["finish_reason"],
             "error": r["error"], "text": r["text"]} for r in records]
        if name == "statickv":
            try:
                samples = parse_metrics(http_get(base + "/metrics")[1])
                entry["metrics"], entry["metrics_before_trace"] = samples, before
                entry["http_cost"] = http_cost(samples, before)
            except (urllib.error.URLError, OSError, ValueError) as e:
                entry["metrics_error"] = f"{type(e).__name__}: {e}"
    except (RuntimeError, urllib.error.URLError, OSError, KeyError, ValueError) as e:
        entry["error"] = str(e)
        print(f"  {name} ({mode}): FAILED: {e}", flush=True)
    finally:
        if server is not None:
            entry["exit_status"], entry["killed_after_30_s"] = server.stop()
            entry["log_tail"] = server.tail(40)
        save()
    return entry


# ----- the report -------------------------------------------------------------------------------


def ms(value, digits=1):
    return "-" if value is None else f"{value * 1e3:.{digits}f}"


def ratio(a, b):
    return a / b if a is not None and b else None


def same_text(a, b):
    """Requests both servers answered with the same text: exactly, and but for a trailing
    U+FFFD (an unfinished UTF-8 sequence at the end: one server may flush it as U+FFFD,
    transformers drops it)."""
    pairs = [(x["text"], y["text"]) for x, y in zip(a["requests"], b["requests"])
             if x["error"] is None and y["error"] is None]
    return (sum(x == y for x, y in pairs),
            sum(x.rstrip("\ufffd") == y.rstrip("\ufffd") for x, y in pairs))


def report(args, results):
    label = {"statickv": f"continuous ({args.max_batch} rows)",
             "continuous": "continuous (paged)", "sequential": "sequential (1 at a time)"}
    print(f"\n  trace: {args.requests} chat requests, Poisson {args.rate:g}/s, seed {args.seed}, "
          f"prompts {args.prompt_tokens} tokens (before the chat template), max_tokens "
          f"{args.max_tokens}, greedy, streamed; {args.device} {args.dtype}, threads "
          f"{args.threads or 'default'}")
    last = results["trace"]["arrivals_s"][-1]
    if last > 0:  # below capacity a server's tok/s is this, whatever its speed
        print(f"  offered load: {args.requests * args.max_tokens / last:.1f} output tok/s "
              f"({args.requests} x {args.max_tokens} tokens over {last:.1f} s of arrivals)")
    header = (f"  {'server':<13} {'batching':<25} {'requests':>8} {'completed':>9} {'errors':>6} "
              f"{'out tok':>7} {'tok/s':>8} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9}")
    print(header + "\n  " + "-" * (len(header) - 2))
    for e in results["servers"]:
        s = e.get("summary")
        mode = label["statickv" if e["server"] == "statickv" else e["mode"]]
        if s is None:
            print(f"  {e['server']:<13} {mode:<25} failed: {e.get('error', '?').splitlines()[0]}")
            continue
        tps = "-" if s["tokens_per_s"] is None else f"{s['tokens_per_s']:.1f}"
        print(f"  {e['server']:<13} {mode:<25} {s['requests']:>8} {s['completed']:>9} "
              f"{s['errors']:>6} {s['output_tokens']:>7} {tps:>8} {ms(s['ttft_p50_s']):>9} "
              f"{ms(s['ttft_p99_s']):>9} {ms(s['tpot_p50_s'], 2):>9}")
    print("  (TTFT, TPOT in ms; tok/s = output tokens / wall time from the first send to the "
          "last completion)")
    for e in results["servers"]:
        for message in (e.get("summary") or {}).get("error_messages", [])[:5]:
            print(f"    {e['server']} ({e['mode']}) {message}")
    sk = next((e for e in results["servers"] if e["server"] == "statickv" and "summary" in e),
              None)
    results["ratios"] = {}
    for e in results["servers"]:
        if e["server"] != "transformers" or "summary" not in e or sk is None:
            continue
        a, b = sk["summary"], e["summary"]
        same, loose = same_text(sk, e)
        r = {"throughput": ratio(a["tokens_per_s"], b["tokens_per_s"]),
             "ttft_p50": ratio(a["ttft_p50_s"], b["ttft_p50_s"]), "same_text": same,
             "same_text_but_a_trailing_replacement_char": loose}
        results["ratios"][e["mode"]] = r
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        print(f"  statickv / transformers ({e['mode']}): throughput {fmt(r['throughput'])}, "
              f"TTFT p50 {fmt(r['ttft_p50'])}; same text in {same}/{args.requests} requests "
              f"({loose} but for a trailing U+FFFD)")
    hf = [e for e in results["servers"] if e["server"] == "transformers" and "summary" in e]
    for a, b in zip(hf, hf[1:]):
        same, _ = same_text(a, b)
        results["ratios"][f"same_text_{a['mode']}_{b['mode']}"] = same
        print(f"  transformers {a['mode']} / {b['mode']}: same text in {same}/{args.requests} "
              "requests")
    if sk is not None:
        c = sk.get("http_cost")
        if c and c["percent_of_step"] is not None:
            verdict = "within" if c["percent_of_step"] <= c["target_percent"] else "OVER"
            print(f"  statickv HTTP cost per token: {c['token_write_mean_s'] * 1e6:.1f} us "
                  f"(mean of {c['token_write_count']:.0f}) = {c['percent_of_step']:.2f}% of a "
                  f"mean engine step of {c['step_mean_s'] * 1e3:.2f} ms (mean of "
                  f"{c['step_count']:.0f}); {verdict} the {c['target_percent']:g}% target")
        else:
            print(f"  statickv HTTP cost per token: not available "
                  f"({sk.get('metrics_error') or 'no samples in /metrics'})")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, type=Path,
                        help="a transformers checkpoint with tokenizer.json and a chat template")
    parser.add_argument("--serve", type=Path, help="statickv-serve (built with --http)")
    parser.add_argument("--make-tiny", action="store_true",
                        help="write a tiny random Llama + tokenizer to --checkpoint if it has none")
    parser.add_argument("--text", type=Path, default=REPO / "docs" / "design.md",
                        help="the text prompts are sliced from")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--rate", type=float, default=2.0, help="Poisson arrivals per second")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prompt-tokens", default="64-256", help="N or A-B, drawn uniformly")
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads per server (0: default)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="fp32", choices=sorted(DTYPE_NAMES))
    parser.add_argument("--max-batch", type=int, default=8, help="statickv rows (and CB's cache)")
    parser.add_argument("--max-len", type=int, default=1024, help="statickv row length")
    parser.add_argument("--prefill-chunk", type=int, default=0,
                        help="statickv's prompt tokens per row per step "
                             "(0: its default, 128 on the CPU and 64 on CUDA)")
    parser.add_argument("--transformers-modes", default="continuous,sequential",
                        help="transformers serve runs: continuous and/or sequential")
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--skip-statickv", action="store_true")
    parser.add_argument("--start-timeout", type=float, default=180.0, help="seconds")
    parser.add_argument("--request-timeout", type=float, default=300.0, help="seconds")
    parser.add_argument("--json", type=Path, help="write everything here")
    return parser.parse_args()


def check_args(args):
    """Checks the numbers and modes of the command line (fail() on the first
    wrong one); the transformers modes to run."""
    args.prompt_range = parse_range(args.prompt_tokens)
    for flag, value, low in (("--requests", args.requests, 1), ("--max-tokens", args.max_tokens, 1),
                             ("--max-batch", args.max_batch, 1), ("--max-len", args.max_len, 2),
                             ("--threads", args.threads, 0)):
        if value < low:
            fail(flag, f"expected a whole number >= {low} but got {value}")
    if not args.rate > 0:
        fail("--rate", f"expected a rate > 0 but got {args.rate}")
    if args.start_timeout <= 0 or args.request_timeout <= 0:
        fail("--start-timeout/--request-timeout", "expected seconds > 0")
    if args.prompt_range[1] + args.max_tokens >= args.max_len:
        fail("--prompt-tokens", f"{args.prompt_tokens} + --max-tokens {args.max_tokens} leaves no "
             f"room for the chat template in --max-len {args.max_len}")
    modes = [] if args.skip_transformers else [m for m in args.transformers_modes.split(",") if m]
    if not set(modes) <= {"continuous", "sequential"}:
        fail("--transformers-modes", f"expected continuous and/or sequential but got "
             f"{args.transformers_modes}")
    return modes


def check_serve(args):
    """--serve: an executable statickv-serve built with --http (unless
    --skip-statickv)."""
    if args.skip_statickv:
        return
    if args.serve is None:
        fail("--serve", "expected statickv-serve (or --skip-statickv)")
    if not (args.serve.is_file() and os.access(args.serve, os.X_OK)):
        fail("--serve", f"{args.serve} is not an executable file")
    try:
        usage = subprocess.run([str(args.serve), "--help"], capture_output=True, text=True,
                               timeout=30)
        usage = usage.stdout + usage.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        fail("--serve", f"{args.serve} --help failed: {e}")
    if "--http" not in usage:
        fail("--serve", f"{args.serve} has no --http (its --help does not list it): "
             "build the HTTP mode, or pass --skip-statickv")


def prepare_checkpoint(args):
    """Checks --json and --text, makes the tiny checkpoint with --make-tiny,
    checks the checkpoint; the text prompts are sliced from."""
    if args.json and not args.json.parent.is_dir():
        fail("--json", f"the folder {args.json.parent} does not exist")
    if not args.text.is_file():
        fail("--text", f"{args.text} is not a file")
    text = args.text.read_text()
    args.checkpoint = args.checkpoint.resolve()
    if args.make_tiny and not (args.checkpoint / "config.json").exists():
        make_tiny(args.checkpoint, text, args.seed)
    for needed in ("config.json", "tokenizer.json"):
        if not (args.checkpoint / needed).is_file():
            fail("--checkpoint", f"{args.checkpoint} has no {needed}")
    return text


def start_results(args, trace):
    """The results' JSON before any server runs."""
    return {
        "benchmark": "http_serve",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "environment": {
            "transformers": version("transformers"), "torch_python": version("torch"),
            "openai": version("openai"), "fastapi": version("fastapi"),
            "uvicorn": version("uvicorn"), "device": args.device, "cpu": cpu_model(),
            "cpu_count": os.cpu_count(), "threads": args.threads or None,
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        },
        "checkpoint": str(args.checkpoint), "dtype": args.dtype,
        "trace": {"requests": args.requests, "rate_per_s": args.rate, "seed": args.seed,
                  "prompt_tokens": list(args.prompt_range), "max_tokens": args.max_tokens,
                  "text": str(args.text), "endpoint": "/v1/chat/completions",
                  "greedy": True, "stream": True,
                  "arrivals_s": [r["arrival_s"] for r in trace],
                  "prompt_tokens_before_template": [r["prompt_tokens_text"] for r in trace],
                  "text_offsets": [r["text_offset"] for r in trace]},
        "statickv": {"max_batch": args.max_batch, "max_len": args.max_len},
        "servers": [],
    }  # fmt: skip


def main():
    args = parse_args()
    modes = check_args(args)
    check_serve(args)
    text = prepare_checkpoint(args)

    tokenizer = Tokenizer.from_file(str(args.checkpoint / "tokenizer.json"))
    trace = build_trace(tokenizer, text, args.requests, args.rate, args.seed, args.prompt_range)
    started = time.perf_counter()
    results = start_results(args, trace)

    def save():
        results["wall_s"] = time.perf_counter() - started
        if args.json:
            args.json.write_text(json.dumps(results, indent=1) + "\n")

    print(f"http_serve: {args.checkpoint.name}, {args.requests} requests at {args.rate:g}/s "
          f"(last arrival {trace[-1]['arrival_s']:.1f} s), prompts {args.prompt_tokens} tokens, "
          f"max_tokens {args.max_tokens}; transformers {version('transformers')}", flush=True)
    if not args.skip_statickv:
        measure(args, trace, "statickv", "continuous", results, save)
    for mode in modes:
        measure(args, trace, "transformers", mode, results, save)
    report(args, results)
    save()
    if args.json:
        print(f"wrote {args.json}")
    failed = any("summary" not in e or e["summary"]["errors"] for e in results["servers"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
