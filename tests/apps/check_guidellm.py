"""guidellm, the load generator, against statickv-serve --http: a fixed
output length benchmark on completions and on chat completes with no error
and every answer at its fixed length.

usage: check_guidellm.py STATICKV_SERVE GUIDELLM WORKDIR
       (run with a Python that has torch, transformers, tokenizers and openai;
        GUIDELLM is the guidellm program of scripts/setup.sh's venv-guidellm)

WORKDIR/tiny gets check_http.py's tiny random Llama and tokenizer, which
guidellm also loads (transformers' AutoTokenizer on the local directory, so
HF_HUB_OFFLINE may stay set) to write its synthetic prompts. Two runs of
`guidellm run`, each a concurrent profile of 4 streams, 16 requests of 32
prompt tokens and 12 output tokens (synthetic_text), streamed: one on
/v1/completions and one on /v1/chat/completions. With output_tokens set,
guidellm asks for a fixed length itself: max_tokens (completions) or
max_completion_tokens (chat) with ignore_eos true, and stream_options with
include_usage and continuous_usage_stats. Requires for each: guidellm exits
0, its JSON report has 16 successful requests and no errored or incomplete
one, every request body sent ignore_eos true, every request's output tokens
(the server-reported completion_tokens) are 12, and the server logged no
ignored field.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_http import COMMON, Checks, Server, make_checkpoint  # noqa: E402

NAME = "tiny-load"
REQUESTS, ISL, OSL = 16, 32, 12
IGNORED = "ignoring the unknown request field"


def benchmark(guidellm, port, tiny, out, route):
    """One `guidellm run` on `route`: (exit status, its output, its JSON report or None)."""
    report = out / "benchmarks.json"
    out.mkdir(parents=True, exist_ok=True)
    run = subprocess.run(
        [guidellm, "run",
         "--backend", f"kind=openai_http,target=http://127.0.0.1:{port},model={NAME},"
                      f"request_format={route},timeout=60",
         "--profile", "kind=concurrent,streams=4",
         "--constraint", f"kind=max_requests,count={REQUESTS}",
         "--data", f"kind=synthetic_text,prompt_tokens={ISL},output_tokens={OSL}",
         "--tokenizer", f"kind=huggingface_auto,model={tiny}",
         "--output", f"kind=json,path={report}", "--disable-console"],
        capture_output=True, text=True, timeout=300, cwd=out)
    data = json.loads(report.read_text()) if report.exists() else None
    return run.returncode, run.stdout + run.stderr, data


def summary(data):
    """(successful, errored, incomplete, output tokens of each, request bodies, first error)
    of a report."""
    if not data or len(data.get("benchmarks", [])) != 1:
        return 0, None, None, [], [], None
    requests = data["benchmarks"][0]["requests"]
    ok, errored = requests.get("successful") or [], requests.get("errored") or []
    bodies = [json.loads(r.get("request_args") or "{}").get("body") or {} for r in ok]
    first = errored[0].get("info", {}).get("error") if errored else None
    return (len(ok), len(errored), len(requests.get("incomplete") or []),
            [r.get("output_tokens") for r in ok], bodies, first)


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__.split("\n\n")[1])
    # Absolute: guidellm runs in its output directory.
    exe, guidellm, work = (Path(a).absolute() for a in sys.argv[1:])
    start, c = time.monotonic(), Checks()
    tiny = work / "tiny"
    make_checkpoint(tiny)
    server = Server(exe, ["--checkpoint", str(tiny), *COMMON, "--max-batch", "8",
                          "--served-model-name", NAME])
    try:
        for what in ("completions", "chat/completions"):
            t0 = time.monotonic()
            rc, log, data = benchmark(guidellm, server.port, tiny,
                                      work / f"out-{what.replace('/', '-')}", f"/v1/{what}")
            ok, errors, incomplete, lengths, bodies, first = summary(data)
            eos = all(b.get("ignore_eos") is True for b in bodies)
            fields = sorted(set().union(*bodies)) if bodies else []
            good = rc == 0 and ok == REQUESTS and errors == 0 and incomplete == 0
            c(good and eos and lengths == [OSL] * REQUESTS,
              f"guidellm /v1/{what}: exit {rc}, {ok} successful, {errors} errored, "
              f"{incomplete} incomplete, output tokens {sorted(set(map(str, lengths)))}, "
              f"fields {fields} ({time.monotonic() - t0:.0f} s)")
            if not good:
                print(log[-3000:] + f"\nfirst error: {first}")
    finally:
        c.stopped(server)
    ignored = [line.strip() for line in server.stderr if IGNORED in line]
    c(not ignored, f"no request field ignored by the server {ignored}")
    return c.exit_status(start)


if __name__ == "__main__":
    sys.exit(main())
