#!/usr/bin/env python3
"""One closed-loop load generator against statickv-serve (HTTP and JSON lines),
`transformers serve --continuous-batching` and llama.cpp's `llama-server`.

usage: serve_load.py --checkpoint DIR --serve BUILD/apps/statickv-serve
                     [--servers statickv,gemm,lines,transformers,llama,NAME...]
                     [--variant NAME=BASE:ARGS ...] [--co-tenant CORE]
                     [--llama-server BIN --gguf FILE] [--aiperf BIN] [--workdir DIR]
                     [--concurrency 1,4,16]
                     [--requests N] [--rounds 1] [--prompt-tokens 96] [--max-tokens 32]
                     [--threads 2] [--max-batch 16] [--max-len 512] [--prefill-chunk 0]
                     [--json OUT] [--strict]

The workload, the same for every server and level: --requests (default 2 x
the concurrency, at least 8) completions whose prompts are distinct slices of
docs/design.md of --prompt-tokens tokens in the checkpoint's tokenizer, sent
as text; greedy (temperature 0), --max-tokens new tokens with ignore_eos
(transformers serve refuses that field with 422, so its answers may end at
eos; tokens/s counts the tokens each server produced), streamed with usage. The client
keeps exactly C requests in flight (C from --concurrency): one thread per
slot, each sending its next request when its last one ends, over plain
http.client, so the client itself costs little CPU.

Servers (a fresh process for every level, so each level's step time is its own):
  statickv      statickv-serve --http: POST /v1/completions, streamed
  gemm          the same with STATICKV_DISABLE_KERNELS=cpu_linear: every projection
                through MKL's GEMM (Note [CPU projections]), the route measured
                fastest against the one it replaced
  lines         statickv-serve in JSON-lines mode, the same requests as lines
                ({"text", "max_new_tokens", "ignore_eos"}) on stdin, C in flight:
                the engine without the HTTP front. TTFT here is the server's own
                (queue_s + ttft_s of each reply), not the client's.
  aiperf        statickv-serve --http driven by aiperf instead of this client
                (completions, streamed, ignore_eos, the same concurrency, count
                and lengths; its own synthetic prompts; artifacts in --workdir):
                the load generator people use, on the same cores
  aiperf-llama  llama-server driven by aiperf the same way
  transformers  transformers serve --continuous-batching (--cb-num-blocks: the
                tokens of statickv's rows), the same completions
  llama         llama-server -m GGUF --parallel MAX_BATCH --ctx-size MAX_BATCH x
                MAX_LEN (continuous batching, its default), the same completions

--variant NAME=BASE:ARGS (repeatable) adds a server NAME to choose in --servers:
BASE (statickv or llama) with ARGS appended to its command line; an ARGS
flag BASE's command already has replaces it there (with its value), and
leading VAR=value words go to its environment instead. For example
  --variant eager=statickv:--eager
  --variant chunk64=statickv:"--prefill-chunk 64 --token-budget 80"
  --variant passive=statickv:OMP_WAIT_POLICY=PASSIVE
  --variant llama-t1=llama:"--threads 1 --threads-batch 1"
A variant of statickv is paired with statickv per round like gemm.

--co-tenant CORE runs a busy loop pinned to CPU CORE (sched_setaffinity) for
the whole run: every server and level shares that core with it, the busy
machine of a server beside its load generator or another tenant.

--rounds N repeats every level N times, the servers interleaved within each
round, each round starting one server later in --servers' order (so no
server always runs first); the table shows each server's median round (by tokens/s) and the
ratios per round (statickv against each other server, each statickv variant
against each llama arm, aiperf against aiperf-llama), their median with min
and max.

Reported per server and level: requests completed, output tokens (usage, else
content chunks), tokens/s (output tokens over the level's wall time), TTFT
p50/p99, inter-token latency p50/p99 (gaps between content chunks), errors,
the client's CPU use (CPU seconds over wall time: this process, or aiperf's);
for statickv and lines the engine's mean step (the server's exit report:
`mean X ms`); how many answers equal statickv's text (greedy, same weights).
Then statickv / lines: tokens/s and mean step, the HTTP front's cost; and
statickv / gemm: what the measured projection route gains over MKL's GEMM.

--strict exits 1 unless every request completed and JSON lines answered
exactly what HTTP answered (greedy): ctest smollm2_serve_load runs a short
statickv,lines level with it.

Bounds: a server start 180 s, a request 300 s. On a 2-core CPU the client,
the server's threads and its engine share the cores: quote --threads with
the numbers. Offline (HF_HUB_OFFLINE=1).
"""

import argparse
import http.client
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import threading
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_serve import (  # noqa: E402  (its server handling and commands)
    Server, free_port, http_get, ms, percentile, statickv_command, transformers_command,
    transformers_env, version)
from hf_compare import cpu_model  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MEAN_STEP = re.compile(r"steps \((\d+) with prefill, mean ([\d.]+) ms\)")
ROUTE = re.compile(r"projections of 1 to \d+ rows by (\w+)(?:, more by (\w+))?")
SERVERS = ("statickv", "gemm", "lines", "aiperf", "aiperf-llama", "transformers", "llama")
VARIANT = re.compile(r"([a-z][a-z0-9-]*)=(statickv|llama):(.*)", re.S)
ENV_WORD = re.compile(r"[A-Z_][A-Z0-9_]*=.*")


def fail(flag, message):
    print(f"serve_load.py: {flag}: {message}", file=sys.stderr)
    sys.exit(2)


# ----- the workload -----------------------------------------------------------------------------


def build_prompts(checkpoint, count, tokens):
    """`count` distinct slices of docs/design.md, `tokens` tokens each, as text."""
    tokenizer = Tokenizer.from_file(str(Path(checkpoint) / "tokenizer.json"))
    ids = tokenizer.encode((REPO / "docs" / "design.md").read_text()).ids
    stride = max(1, (len(ids) - tokens) // max(1, count))
    if len(ids) < tokens + count:
        fail("--prompt-tokens", f"expected at most {len(ids) - count} for docs/design.md")
    return [tokenizer.decode(ids[i * stride:i * stride + tokens]) for i in range(count)]


def request_body(args, prompt, model, server):
    body = {"model": model, "prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    if server != "transformers":  # it answers 422 to ignore_eos: its lengths may end at eos
        body["ignore_eos"] = True
    return body


# ----- the HTTP client --------------------------------------------------------------------------


def stream_one(port, body, timeout):
    """One streamed completion: its send time, content-chunk times, text and tokens."""
    record = {"sent": time.perf_counter(), "chunks": [], "text": "", "tokens": None, "error": None}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/v1/completions", json.dumps(body),
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            record["error"] = f"HTTP {response.status}: {response.read()[:200]!r}"
            return record
        for raw in response:
            read_event(raw, record)
    except (OSError, http.client.HTTPException) as e:
        record["error"] = repr(e)
    finally:
        connection.close()
    record["ended"] = time.perf_counter()
    return record


def read_event(raw, record):
    line = raw.decode("utf-8", "replace").strip()
    if not line.startswith("data:") or line == "data: [DONE]":
        return
    event = json.loads(line[5:])
    for choice in event.get("choices") or []:
        text = choice.get("text") or ""
        if text:
            record["chunks"].append(time.perf_counter())
            record["text"] += text
    if event.get("usage"):
        record["tokens"] = event["usage"].get("completion_tokens")


def closed_loop(concurrency, items, send):
    """Runs send(item) for every item with `concurrency` in flight; results in order."""
    results = [None] * len(items)
    next_index = iter(range(len(items)))
    lock = threading.Lock()

    def slot():
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            results[i] = send(items[i])

    threads = [threading.Thread(target=slot) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# ----- JSON lines -------------------------------------------------------------------------------


class Lines:
    """statickv-serve in JSON-lines mode: requests written as lines, replies read by id."""

    def __init__(self, command):
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, bufsize=1)
        self.replies, self.stderr = {}, deque(maxlen=50)
        self.changed = threading.Condition()
        self.write_lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            reply = json.loads(line)
            with self.changed:
                self.replies[str(reply["id"])] = (reply, time.perf_counter())
                self.changed.notify_all()

    def _read_stderr(self):
        for line in self.process.stderr:
            self.stderr.append(line.rstrip("\n"))

    def send(self, request_id, message, timeout):
        record = {"sent": time.perf_counter(), "chunks": [], "error": None}
        with self.write_lock:
            self.process.stdin.write(json.dumps(dict(message, id=request_id)) + "\n")
            self.process.stdin.flush()
        with self.changed:
            if not self.changed.wait_for(lambda: request_id in self.replies, timeout):
                record["error"] = "no reply"
                return record
            reply, record["ended"] = self.replies.pop(request_id)
        record.update(text=reply.get("text", ""), tokens=len(reply["tokens"]),
                      ttft=reply["queue_s"] + reply["ttft_s"], error=reply.get("error"))
        return record

    def stop(self):
        self.process.stdin.close()
        self.process.wait(timeout=120)
        time.sleep(0.2)
        return "\n".join(self.stderr)


# ----- the servers ------------------------------------------------------------------------------


def lines_command(args):
    command = statickv_command(args)
    at = command.index("--http")
    return command[:at] + command[at + 2:]


def llama_command(args, port):
    return [str(args.llama_server), "-m", str(args.gguf), "--host", "127.0.0.1", "--port",
            str(port), "--parallel", str(args.max_batch), "--ctx-size",
            str(args.max_batch * args.max_len), "--threads", str(args.threads),
            "--threads-batch", str(args.threads), "--no-webui", "--log-disable"]


def with_args(command, env, words):
    """A variant's command and environment: leading VAR=value words set variables, the
    other words are appended, and a flag the command already has is dropped there first
    (with its value)."""
    env, words = dict(env or os.environ), list(words)
    while words and ENV_WORD.fullmatch(words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    command = list(command)
    for word in words:
        if word.startswith("--") and word in command:
            at = command.index(word)
            has_value = at + 1 < len(command) and not command[at + 1].startswith("--")
            del command[at:at + 1 + has_value]
    return command + words, env


def server_spec(args, name, port):
    """(command, environment or None, base server) of HTTP server `name` (a variant too)."""
    base, words = args.variants.get(name, (name, []))
    if base == "llama":
        command, env = llama_command(args, port), None
    elif base == "transformers":
        command, env = transformers_command(args, "continuous", port), transformers_env(args)
    else:
        command = statickv_command(args)
        env = dict(os.environ, STATICKV_DISABLE_KERNELS="cpu_linear") if base == "gemm" else None
    if words:
        command, env = with_args(command, env, words)
    return command, env, base


def start_http(args, name):
    """(server, port, model name) of a started, ready HTTP server."""
    port = free_port()
    command, env, base = server_spec(args, name, port)
    server = Server(name, command, env=env)
    # statickv-serve binds port 0 and prints the port it got; the others take `port`
    server.wait_ready(args.start_timeout, port=port if base in ("llama", "transformers") else None)
    # The model's name as the server lists it (transformers: the checkpoint path).
    _, listing = http_get(f"http://127.0.0.1:{server.port}/v1/models")
    return server, server.port, json.loads(listing)["data"][0]["id"]


def start_co_tenant(core):
    """--co-tenant: a busy loop pinned to CPU `core` until it is killed."""
    loop = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True:\n    pass\n"
    return subprocess.Popen([sys.executable, "-c", loop])


def run_http(args, name, concurrency, prompts):
    server, port, model = start_http(args, name)
    try:
        for prompt in prompts[:2]:  # warm: first-call costs stay out of the level
            stream_one(port, dict(request_body(args, prompt, model, name), max_tokens=4),
                       args.request_timeout)
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        records = closed_loop(concurrency, prompts,
                              lambda p: stream_one(port, request_body(args, p, model, name),
                                                   args.request_timeout))
        wall, client = time.perf_counter() - started, cpu_seconds(before)
    finally:
        server.stop()
    return records, wall, client, server.tail(60)


def run_lines(args, concurrency, prompts):
    server = Lines(lines_command(args))
    message = {"max_new_tokens": args.max_tokens, "ignore_eos": True}
    try:
        for i, prompt in enumerate(prompts[:2]):
            server.send(f"warm{i}", dict(message, text=prompt, max_new_tokens=4),
                        args.request_timeout)
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        records = closed_loop(concurrency, list(enumerate(prompts)),
                              lambda item: server.send(str(item[0]), dict(message, text=item[1]),
                                                       args.request_timeout))
        wall, client = time.perf_counter() - started, cpu_seconds(before)
    finally:
        report = server.stop()
    return records, wall, client, report


def run_aiperf(args, name, concurrency, prompts):
    """statickv-serve --http (aiperf) or llama-server (aiperf-llama) under aiperf
    (completions, streamed, ignore_eos) at the same concurrency, count and
    lengths: the load generator people use, on the same cores. Its synthetic
    prompts are its own (--isl tokens each)."""
    server, port, model = start_http(args, "llama" if name == "aiperf-llama" else "statickv")
    out = Path(args.workdir) / f"aiperf-c{concurrency}-{time.time_ns()}"
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # check_aiperf.py
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    try:
        subprocess.run(
            [str(args.aiperf), "profile", "--model", model, "--url", f"http://127.0.0.1:{port}",
             "--endpoint-type", "completions", "--streaming", "--concurrency", str(concurrency),
             "--request-count", str(len(prompts)), "--isl", str(args.prompt_tokens),
             "--osl", str(args.max_tokens), "--tokenizer", str(args.checkpoint),
             "--output-artifact-dir", str(out), "--random-seed", "7", "--no-gpu-telemetry",
             "--no-server-metrics", "--ui-type", "none", "--extra-inputs", "ignore_eos:true"],
            capture_output=True, text=True, timeout=args.request_timeout * 2, env=env, check=True)
    finally:
        wall = time.perf_counter() - started
        server.stop()
    return aiperf_summary(out / "profile_export_aiperf.json", wall, cpu_seconds(before, True),
                          server.tail(60))


def aiperf_summary(path, wall, client_cpu, report):
    d = json.loads(path.read_text())
    ms_of = lambda key, p: d[key][p] / 1e3  # noqa: E731
    done = int(d["request_count"]["avg"])
    return {"completed": done, "requests": done, "output_tokens": int(d["total_osl"]["avg"]),
            "wall_s": d["benchmark_duration"]["avg"],
            "tokens_per_s": d["output_token_throughput"]["avg"],
            "ttft_p50_s": ms_of("time_to_first_token", "p50"),
            "ttft_p99_s": ms_of("time_to_first_token", "p99"),
            "itl_p50_s": ms_of("inter_token_latency", "p50"),
            "itl_p99_s": ms_of("inter_token_latency", "p99"), "mean_step_ms": mean_step(report),
            "route": projection_route(report), "client_cpu": client_cpu / wall, "texts": [],
            "errors": []}


def cpu_seconds(before, children=False):
    """User + system CPU seconds of this process (or its waited-for children) since `before`."""
    now = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return now.ru_utime + now.ru_stime - before.ru_utime - before.ru_stime


def mean_step(text):
    """The engine's mean step in ms from statickv-serve's exit report (None elsewhere)."""
    found = MEAN_STEP.findall(text)
    return float(found[-1][1]) if found else None


def projection_route(text):
    """The CPU projections' routes statickv-serve's exit report names, a few rows' then more
    rows' ("stream/onednn"; None elsewhere)."""
    found = ROUTE.findall(text)
    return "/".join(r for r in found[-1] if r) if found else None


# ----- what is reported -------------------------------------------------------------------------


def summarize(records, wall, client_cpu, report):
    done = [r for r in records if r and not r.get("error")]
    tokens = [r["tokens"] if r["tokens"] is not None else len(r["chunks"]) for r in done]
    ttft = [r["ttft"] if "ttft" in r else r["chunks"][0] - r["sent"] for r in done
            if "ttft" in r or r["chunks"]]
    gaps = [b - a for r in done for a, b in zip(r["chunks"], r["chunks"][1:])]
    return {"completed": len(done), "requests": len(records), "output_tokens": sum(tokens),
            "wall_s": wall, "tokens_per_s": sum(tokens) / wall if wall > 0 else None,
            "ttft_p50_s": percentile(ttft, 0.5), "ttft_p99_s": percentile(ttft, 0.99),
            "itl_p50_s": percentile(gaps, 0.5), "itl_p99_s": percentile(gaps, 0.99),
            "mean_step_ms": mean_step(report), "route": projection_route(report),
            "client_cpu": client_cpu / wall,
            "texts": [r.get("text") for r in records],
            "errors": [r["error"] for r in records if r and r.get("error")][:5]}


def median_round(rounds):
    """The round whose tokens/s is the median (the lower of two middles)."""
    ordered = sorted(rounds, key=lambda r: r["tokens_per_s"] or 0)
    return ordered[(len(ordered) - 1) // 2]


def spread(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return "-"
    return f"{values[(len(values) - 1) // 2]:.3f} [{values[0]:.3f}, {values[-1]:.3f}]"


def print_level(concurrency, rounds, variants):
    """rounds: {server: [summary per round]}; the table shows each one's median round."""
    print(f"\nconcurrency {concurrency} ({len(next(iter(rounds.values())))} rounds; "
          f"each server's median round):")
    print(f"  {'server':<20} {'done':>7} {'tokens':>6} {'tok/s':>7} {'TTFT p50':>9} "
          f"{'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8} {'step ms':>8} {'client':>6} "
          f"{'same text':>9}")
    results = {name: median_round(r) for name, r in rounds.items()}
    reference = results.get("statickv", results.get("lines"))
    for name, r in results.items():
        same = "-"
        if reference and name != "statickv" and not name.startswith("aiperf"):
            pairs = list(zip(r["texts"], reference["texts"]))
            same = f"{sum(a == b for a, b in pairs)}/{len(pairs)}"
        step = "-" if r["mean_step_ms"] is None else f"{r['mean_step_ms']:.1f}"
        if r.get("route"):
            name = f"{name} ({r['route']})"
        print(f"  {name:<20} {r['completed']:>3}/{r['requests']:<3} {r['output_tokens']:>6} "
              f"{r['tokens_per_s']:>7.2f} {ms(r['ttft_p50_s'], 0):>9} {ms(r['ttft_p99_s'], 0):>9} "
              f"{ms(r['itl_p50_s'], 0):>8} {ms(r['itl_p99_s'], 0):>8} {step:>8} "
              f"{100 * r['client_cpu']:>5.0f}% {same:>9}")
        for error in r["errors"]:
            print(f"    error: {error}")
    for mine, other in pairings(rounds, variants):
        print_pairs(mine, other, list(zip(rounds[mine], rounds[other])))


def pairings(rounds, variants):
    """(numerator, denominator) server pairs compared per round: statickv against every
    other server this client drives, each statickv variant against every llama arm, and
    aiperf against aiperf-llama."""
    pairs = [("statickv", name) for name in rounds
             if name != "statickv" and not name.startswith("aiperf") and "statickv" in rounds]
    llamas = [n for n in rounds if n == "llama" or variants.get(n, ("",))[0] == "llama"]
    pairs += [(name, llama) for name in rounds for llama in llamas
              if variants.get(name, ("",))[0] == "statickv"]
    if "aiperf" in rounds and "aiperf-llama" in rounds:
        pairs.append(("aiperf", "aiperf-llama"))
    return pairs


def print_pairs(mine, other, pairs):
    """`mine` / `other` per round: tokens/s, TTFT p50, ITL p99 and mean step, each the
    median [min, max] of the rounds' ratios."""
    def ratios(key):
        return [a[key] / b[key] for a, b in pairs if a[key] and b[key]]
    print(f"  {mine} / {other} per round, median [min, max]: tokens/s "
          f"{spread(ratios('tokens_per_s'))}, TTFT p50 {spread(ratios('ttft_p50_s'))}, "
          f"ITL p99 {spread(ratios('itl_p99_s'))}, mean step {spread(ratios('mean_step_ms'))}")


# ----- main -------------------------------------------------------------------------------------


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--serve", type=Path, required=True)
    p.add_argument("--servers", default="statickv,lines,transformers,llama")
    p.add_argument("--variant", action="append", default=[])
    p.add_argument("--co-tenant", type=int)
    p.add_argument("--llama-server", type=Path)
    p.add_argument("--gguf", type=Path)
    p.add_argument("--aiperf", type=Path)
    p.add_argument("--workdir", type=Path, default=Path("results/serve_load"))
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument("--requests", type=int, default=0)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--prompt-tokens", type=int, default=96)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-batch", type=int, default=16)
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--prefill-chunk", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--start-timeout", type=float, default=180.0)
    p.add_argument("--request-timeout", type=float, default=300.0)
    p.add_argument("--json", type=Path)
    p.add_argument("--strict", action="store_true")
    args = p.parse_args()
    check_args(args)
    return args


def parse_variants(values):
    """--variant NAME=BASE:ARGS values as {NAME: (BASE, [words])}."""
    variants = {}
    for value in values:
        m = VARIANT.fullmatch(value)
        if not m or m.group(1) in SERVERS or m.group(1) in variants:
            fail("--variant", f"expected NAME=statickv:ARGS or NAME=llama:ARGS with a new "
                 f"lowercase NAME (not one of {','.join(SERVERS)}) but got {value!r}")
        variants[m.group(1)] = (m.group(2), shlex.split(m.group(3)))
    return variants


def check_args(args):
    args.servers = [s for s in args.servers.split(",") if s]
    args.variants = parse_variants(args.variant)
    for s in args.servers:
        if s not in SERVERS and s not in args.variants:
            fail("--servers", f"expected names from {','.join(SERVERS + tuple(args.variants))} "
                 f"but got {s!r}")
    if args.co_tenant is not None and args.co_tenant not in os.sched_getaffinity(0):
        fail("--co-tenant", f"expected a CPU of {sorted(os.sched_getaffinity(0))} but got "
             f"{args.co_tenant}")
    try:
        args.concurrency = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        fail("--concurrency", f"expected integers, e.g. 1,4,16, but got {args.concurrency!r}")
    if args.rounds < 1:
        fail("--rounds", f"expected >= 1 but got {args.rounds}")
    if any(c < 1 or c > args.max_batch for c in args.concurrency):
        fail("--concurrency", f"expected levels in 1..--max-batch={args.max_batch}")
    if any(s.startswith("aiperf") for s in args.servers) and not (args.aiperf and
                                                                 args.aiperf.is_file()):
        fail("--servers", "aiperf needs --aiperf BIN (scripts/setup.sh's venv-aiperf/bin/aiperf)")
    llama = {"llama", "aiperf-llama"} | {n for n, (b, _) in args.variants.items() if b == "llama"}
    if llama & set(args.servers) and not (args.llama_server and args.gguf):
        fail("--servers", "llama needs --llama-server and --gguf "
             "(benchmarks/servers/llama_server.sh builds both)")
    if not (args.serve.is_file() and (args.checkpoint / "tokenizer.json").is_file()):
        fail("--serve/--checkpoint", "expected statickv-serve and a checkpoint with tokenizer.json")
    if args.prompt_tokens + args.max_tokens > args.max_len:
        fail("--max-len", f"expected >= --prompt-tokens + --max-tokens = "
             f"{args.prompt_tokens + args.max_tokens} but got {args.max_len}")


def main():
    args = parse_args()
    print(f"serve_load.py: {', '.join(args.servers)}; {args.prompt_tokens}-token prompts, "
          f"{args.max_tokens} new tokens; max batch {args.max_batch}; {args.threads} threads; "
          f"{cpu_model()}; transformers {version('transformers')}")
    for name, (base, words) in args.variants.items():
        print(f"  variant {name}: {base} {shlex.join(words)}")
    co_tenant = None if args.co_tenant is None else start_co_tenant(args.co_tenant)
    if co_tenant:
        print(f"  co-tenant: a busy loop pinned to CPU {args.co_tenant} for the whole run")
    try:
        levels = run_levels(args)
    finally:
        if co_tenant:
            co_tenant.kill()
            co_tenant.wait()
    problems = check_levels(levels) if args.strict else []
    for problem in problems:
        print(f"serve_load.py: --strict: {problem}", file=sys.stderr)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"date": datetime.now(timezone.utc).isoformat(),
                                         "args": {k: str(v) for k, v in vars(args).items()},
                                         "levels": levels}, indent=1))
    sys.exit(1 if problems else 0)


def run_levels(args):
    """Every --concurrency level, its servers interleaved round after round."""
    levels = []
    for concurrency in args.concurrency:
        count = args.requests or max(8, 2 * concurrency)
        prompts = build_prompts(args.checkpoint, count, args.prompt_tokens)
        rounds = {name: [] for name in args.servers}
        for r in range(args.rounds):  # servers interleaved, round after round,
            shift = r % len(args.servers)  # each round starting one server later
            for name in args.servers[shift:] + args.servers[:shift]:
                if name.startswith("aiperf"):
                    rounds[name].append(run_aiperf(args, name, concurrency, prompts))
                    continue
                run = run_lines(args, concurrency, prompts) if name == "lines" else \
                    run_http(args, name, concurrency, prompts)
                rounds[name].append(summarize(*run))
        print_level(concurrency, rounds, args.variants)
        levels.append({"concurrency": concurrency, "servers": rounds})
    return levels


def check_levels(levels):
    """--strict: every request completed, and JSON lines answered what HTTP answered."""
    problems = []
    for level in levels:
        c, servers = level["concurrency"], level["servers"]
        for name, rounds in servers.items():
            for r in rounds:
                if r["completed"] != r["requests"]:
                    problems.append(f"{name} at concurrency {c}: {r['completed']} of "
                                    f"{r['requests']} requests completed {r['errors']}")
        for h, j in zip(servers.get("statickv", []), servers.get("lines", [])):
            if h["texts"] != j["texts"]:
                problems.append(f"concurrency {c}: JSON lines and HTTP answered differently")
    return problems


if __name__ == "__main__":
    main()
