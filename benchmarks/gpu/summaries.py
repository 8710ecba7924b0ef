#!/usr/bin/env python3
"""The GPU run's per-stage summaries (benchmarks/gpu/run_gpu.sh), one JSON
object a line in $OUT/summaries.jsonl, appended after every stage so a run
killed at its limit keeps what finished.

  summaries.py env [--manifest M] [--dry-run]
                                         prints the run's environment as JSON:
                                         commit (git's, else the manifest
                                         prep.sh sent), date, torch,
                                         transformers, GPU, dry_run
  summaries.py add FILE --stage NAME --exit RC --seconds S --env JSON
               [--skipped WHY] [--result PATH ...] [--log PATH]
               [--sources-hash H]
                                         appends one stage's line: the
                                         environment, the exit status, the
                                         time, the hash of its sources
                                         (stages.py), each result JSON it
                                         wrote (inlined) and its log's last
                                         lines
  summaries.py check FILE --stages A,B,...
                                         the dry run's test: every line has
                                         the environment fields, every stage
                                         that ran exited 0 (77: skipped, no
                                         GPU) and every named stage is there
  summaries.py check-resume FILE --committed C --ran A,B
                                         the resumed dry run's test: the named
                                         stages ran, and every other stage
                                         that exited 0 in the committed
                                         summaries C was skipped as done
"""

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stages  # noqa: E402  (beside this file)

ENV_FIELDS = ("commit", "date", "torch", "transformers", "gpu")


def environment(manifest=None, dry_run=False):
    # The manifest names the commit prep.sh saw; on the GPU machine it wins,
    # since what travels there may hold a stale .git beside the tree.
    commit = "unknown"
    if not dry_run and manifest and Path(manifest).is_file():
        sent = json.loads(Path(manifest).read_text())
        commit = sent.get("describe", sent.get("commit", "unknown"))
        # A tree changed after prep.sh is not that commit: say so, rather
        # than record another commit's name on these results.
        if sent.get("tree") and sent["tree"] != stages.tree_hash():
            commit += "+changed-after-prep"
    if commit == "unknown":
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                    check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown"
    env = {"commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "torch": None, "transformers": None, "gpu": None, "dry_run": dry_run}
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
    if args.sources_hash:
        line["sources_hash"] = args.sources_hash
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


def check_resume(args):
    lines = [json.loads(text) for text in Path(args.file).read_text().splitlines() if text]
    committed = [json.loads(text) for text in Path(args.committed).read_text().splitlines() if text]
    passed = {c.get("stage") for c in committed if c.get("exit") == 0 and "skipped" not in c}
    ran = set(args.ran.split(","))
    failures = []
    for line in lines:
        name, skipped = line.get("stage"), line.get("skipped", "")
        if name in ran and skipped:
            failures.append(f"{name}: expected it to run (its sources changed) but: {skipped}")
        elif name not in ran and name in passed and not skipped:
            failures.append(f"{name}: expected it skipped as done but it ran again")
    for name in ran - {line.get("stage") for line in lines}:
        failures.append(f"{name}: expected a summary line for this stage but found none")
    done = sum(1 for line in lines if line.get("skipped", "").startswith("done"))
    for failure in failures:
        print("FAIL", failure)
    print(f"resumed: {done} stages skipped as done, {len(failures)} failures")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    e = sub.add_parser("env")
    e.add_argument("--manifest")
    e.add_argument("--dry-run", action="store_true")
    a = sub.add_parser("add")
    a.add_argument("file")
    a.add_argument("--stage", required=True)
    a.add_argument("--exit", type=int)
    a.add_argument("--seconds", type=int, default=0)
    a.add_argument("--env", required=True)
    a.add_argument("--skipped")
    a.add_argument("--result", nargs="*")
    a.add_argument("--log")
    a.add_argument("--sources-hash")
    c = sub.add_parser("check")
    c.add_argument("file")
    c.add_argument("--stages", required=True)
    r = sub.add_parser("check-resume")
    r.add_argument("file")
    r.add_argument("--committed", required=True)
    r.add_argument("--ran", required=True)
    args = parser.parse_args()
    if args.command == "env":
        print(json.dumps(environment(args.manifest, args.dry_run)))
    elif args.command == "add":
        add(args)
    elif args.command == "check-resume":
        sys.exit(check_resume(args))
    else:
        sys.exit(check(args))


if __name__ == "__main__":
    main()
