#!/usr/bin/env python3
"""Runs statickv-demo on the checkpoints of make_reference.py and requires
Hugging Face's greedy tokens.

usage: check_demo.py DEMO_EXE HF_DIR

For each model directory of HF_DIR (MODELS below), runs
  DEMO_EXE --checkpoint DIR --device cpu --dtype fp32 --cache hybrid
           --prompt-ids "$(cat DIR/prompts.txt)" --max-new-tokens 8 --print-ids
and compares the lines made only of digits and commas (one per prompt, in
order) with DIR/expected_ids.txt. Exits non-zero on any mismatch or failure.
"""

import re
import shlex
import subprocess
import sys
from pathlib import Path

MODELS = ("llama", "llama-bias", "mistral", "qwen2", "qwen2-nowindow", "qwen2-defaults", "qwen3",
          "gemma2", "gemma3", "phi3")
MAX_NEW_TOKENS = 8
IDS_LINE = re.compile(r"^[0-9]+(,[0-9]+)*$")


def check(demo, model_dir):
    """Returns None when the demo prints the expected ids, else what went wrong."""
    prompts = (model_dir / "prompts.txt").read_text().strip()
    expected = (model_dir / "expected_ids.txt").read_text().split()
    command = [
        str(demo),
        "--checkpoint", str(model_dir),
        "--device", "cpu",
        "--dtype", "fp32",
        "--cache", "hybrid",
        "--prompt-ids", prompts,
        "--max-new-tokens", str(MAX_NEW_TOKENS),
        "--print-ids",
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        return (
            f"exit status {run.returncode}\n  command: {shlex.join(command)}\n"
            f"  stdout:\n{run.stdout}\n  stderr:\n{run.stderr}"
        )
    actual = [line.strip() for line in run.stdout.splitlines() if IDS_LINE.match(line.strip())]
    if actual != expected:
        lines = [f"  command: {shlex.join(command)}"]
        for i in range(max(len(actual), len(expected))):
            got = actual[i] if i < len(actual) else "(missing)"
            want = expected[i] if i < len(expected) else "(none)"
            mark = "  " if got == want else "!="
            lines.append(f"  prompt {i}: {mark} demo {got}  hf {want}")
        return "generated ids differ\n" + "\n".join(lines) + f"\n  stdout:\n{run.stdout}"
    return None


def main():
    if len(sys.argv) != 3:
        raise SystemExit(f"usage: {sys.argv[0]} DEMO_EXE HF_DIR")
    demo, hf_dir = Path(sys.argv[1]), Path(sys.argv[2])
    failures = 0
    for name in MODELS:
        model_dir = hf_dir / name
        if not (model_dir / "expected_ids.txt").is_file():
            print(f"FAIL {name}: {model_dir}/expected_ids.txt missing (run make_reference.py)")
            failures += 1
            continue
        problem = check(demo, model_dir)
        if problem is None:
            count = len((model_dir / "expected_ids.txt").read_text().split())
            print(f"ok   {name}: {count} prompts, demo --cache hybrid matches Hugging Face's ids")
        else:
            print(f"FAIL {name}: {problem}")
            failures += 1
    print(f"{len(MODELS) - failures}/{len(MODELS)} models match")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
