"""aiperf, the load generator, against statickv-serve --http: short
streamed profiles on chat and on completions complete with no error and
every answer at its fixed length.

usage: check_aiperf.py STATICKV_SERVE AIPERF WORKDIR
       (run with a Python that has torch, transformers, tokenizers and openai;
        AIPERF is the aiperf program of scripts/setup.sh's venv-aiperf)

WORKDIR/tiny gets check_http.py's tiny random Llama and tokenizer, which
aiperf also uses to write its synthetic prompts. aiperf treats a local
tokenizer directory as a hub snapshot when HF_HUB_OFFLINE is set, so it runs
without it (the directory is local; nothing is downloaded). Three profiles
at concurrency 4, each 16 requests of 32 prompt tokens and 12 output tokens:
chat streamed with --extra-inputs ignore_eos:true (a fixed-length load
test), completions streamed with the same, and chat streamed without it.
Requires for each: aiperf exits 0, 16 requests complete, none is an error,
and every request's server-reported completion tokens are 12.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_http import COMMON, Checks, Server, make_checkpoint  # noqa: E402

NAME = "tiny-load"
REQUESTS, ISL, OSL = 16, 32, 12


def profile(aiperf, port, tiny, out, endpoint, extra):
    """One aiperf profile: (exit status, its output, per-request records)."""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    run = subprocess.run(
        [aiperf, "profile", "--model", NAME, "--url", f"http://127.0.0.1:{port}",
         "--endpoint-type", endpoint, "--streaming", "--concurrency", "4",
         "--request-count", str(REQUESTS), "--isl", str(ISL), "--osl", str(OSL),
         "--tokenizer", str(tiny), "--output-artifact-dir", str(out), "--random-seed", "7",
         "--no-gpu-telemetry", "--no-server-metrics", "--ui-type", "none", *extra],
        capture_output=True, text=True, timeout=300, env=env)
    records = []
    path = out / "profile_export.jsonl"
    if path.exists():
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return run.returncode, run.stdout + run.stderr, records


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__.split("\n\n")[1])
    exe, aiperf, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    start, c = time.monotonic(), Checks()
    tiny = work / "tiny"
    make_checkpoint(tiny)
    server = Server(exe, ["--checkpoint", str(tiny), *COMMON, "--max-batch", "8",
                          "--served-model-name", NAME])
    runs = [("chat, ignore_eos", "chat", ["--extra-inputs", "ignore_eos:true"]),
            ("completions, ignore_eos", "completions", ["--extra-inputs", "ignore_eos:true"]),
            ("chat", "chat", [])]
    try:
        for i, (what, endpoint, extra) in enumerate(runs):
            t0 = time.monotonic()
            rc, log, records = profile(aiperf, server.port, tiny, work / f"out-{i}", endpoint,
                                       extra)
            errors = [r for r in records if r.get("error")]
            lengths = [r.get("metrics", {}).get("usage_completion_tokens", {}).get("value")
                       for r in records]
            ok = rc == 0 and len(records) == REQUESTS and not errors
            c(ok and lengths == [OSL] * REQUESTS,
              f"aiperf {what}: exit {rc}, {len(records)} requests, {len(errors)} errors, "
              f"completion tokens {sorted(set(map(str, lengths)))} "
              f"({time.monotonic() - t0:.0f} s)")
            if not ok:
                print(log[-3000:])
    finally:
        c.stopped(server)
    return c.exit_status(start)


if __name__ == "__main__":
    sys.exit(main())
