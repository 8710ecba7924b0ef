#!/usr/bin/env python3
"""The GPU run's per-stage summaries (benchmarks/gpu/run_gpu.sh), one JSON
object a line in $OUT/summaries.jsonl, appended after every stage so a run
killed at its limit keeps what finished.

  summaries.py env                       prints the run's environment as JSON:
                                         commit, date, torch, transformers, GPU
  summaries.py add FILE --stage NAME --exit RC --seconds S --env JSON
               [--skipped WHY] [--result PATH ...] [--log PATH]
                                         appends one stage's line: the
                                         environment, the exit status, the
                                         time, each result JSON it wrote
                                         (inlined) and its log's last lines
  summaries.py check FILE --stages A,B,...
                                         the dry run's test: every line has
                                         the environment fields, every stage
                                         that ran exited 0 (77: skipped, no
                                         GPU) and every named stage is there
"""

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

ENV_FIELDS = ("commit", "date", "torch", "transformers", "gpu")


def environment():
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    env = {"commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "torch": None, "transformers": None, "gpu": None}
    try:
        import torch

        env["torch"] = torch.__version__
        env["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    except ImportError:
        pass
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    return env


def add(args):
    line = dict(json.loads(args.env))
    line.update(stage=args.stage, exit=args.exit, seconds=args.seconds)
    if args.skipped:
        line["skipped"] = args.skipped
    results = {}
    for path in args.result or []:
        try:
            results[Path(path).name] = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            pass  # the stage wrote nothing (killed, failed): its exit says so
    if results:
        line["results"] = results
    if args.log and Path(args.log).is_file():
        line["log_tail"] = Path(args.log).read_text(errors="replace").splitlines()[-15:]
    with open(args.file, "a") as f:
        f.write(json.dumps(line) + "\n")


def check(args):
    lines = [json.loads(text) for text in Path(args.file).read_text().splitlines() if text]
    failures = []
    seen = set()
    for line in lines:
        name = line.get("stage")
        seen.add(name)
        missing = [f for f in ENV_FIELDS if f not in line]
        if missing:
            failures.append(f"{name}: expected the fields {missing}")
        if "skipped" not in line and line.get("exit") not in (0, 77):
            failures.append(f"{name}: exited {line.get('exit')}: {line.get('log_tail')}")
    for name in args.stages.split(","):
        if name not in seen:
            failures.append(f"{name}: expected a summary line for this stage but found none")
    for failure in failures:
        print("FAIL", failure)
    print(f"{len(lines)} stage summaries, {len(failures)} failures")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("env")
    a = sub.add_parser("add")
    a.add_argument("file")
    a.add_argument("--stage", required=True)
    a.add_argument("--exit", type=int)
    a.add_argument("--seconds", type=int, default=0)
    a.add_argument("--env", required=True)
    a.add_argument("--skipped")
    a.add_argument("--result", nargs="*")
    a.add_argument("--log")
    c = sub.add_parser("check")
    c.add_argument("file")
    c.add_argument("--stages", required=True)
    args = parser.parse_args()
    if args.command == "env":
        print(json.dumps(environment()))
    elif args.command == "add":
        add(args)
    else:
        sys.exit(check(args))


if __name__ == "__main__":
    main()
