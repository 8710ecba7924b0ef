"""Runs statickv-demo on the tiny shapes and pins its comparison with the
DynamicCache baseline: the verdict line, the logits line, exit status 0, and
that --prefill-chunk applies to both runs.

usage: check_demo_verdict.py DEMO_EXE
"""

import re
import subprocess
import sys

COMMON = ["--device", "cpu", "--batch", "3", "--prompt-len", "12", "--max-new-tokens", "8"]

# (arguments, regular expressions every one of which must match stdout)
CASES = [
    # fp32: the two runs agree to rounding; greedy tokens are identical.
    (["--shape", "tiny", "--dtype", "fp32"],
     [r"^logits vs dynamic: max \|difference\| \S+ over 24 steps from the same prefix "
      r"\(tolerance 0\.0001 in fp32\)$",
      r"^tokens vs dynamic: identical$",
      r"^verdict: OK: static and dynamic caches agree"]),
    # bf16: rounding is larger, the verdict must still say OK (a token may
    # differ only at a near tie).
    (["--shape", "tiny", "--dtype", "bf16"],
     [r"^logits vs dynamic: .* \(tolerance 0\.5 in bf16\)$",
      r"^verdict: OK: static and dynamic caches agree"]),
    # Longer bf16 runs meet near ties: on x86-64 CPUs seed 4 flips one
    # greedy token 0.002 apart (another CPU may flip none); either way the
    # verdict is OK, and a flip must be reported as a near tie.
    (["--shape", "tiny", "--dtype", "bf16", "--seed", "4", "--batch", "4", "--prompt-len", "24",
      "--max-new-tokens", "40"],
     [r"^tokens vs dynamic: (identical|1 of 4 prompts differ; first: prompt \d+, token \d+: "
      r"static \d+, dynamic \d+, \S+ apart in dynamic's logits \(a near tie: <= 0\.1\))$",
      r"^verdict: OK: static and dynamic caches agree"]),
    # Sliding layers: the hybrid cache, prefilled in chunks of 5 in both
    # runs, on the fused path (--path auto, the default: Note [fused decode
    # path]) against the plain dynamic baseline.
    (["--shape", "tiny-qwen2", "--dtype", "fp32", "--prefill-chunk", "5"],
     [r"prefill in passes of 5 tokens \(both runs\); fused decoder layers$",
      r"^tokens vs dynamic: identical$",
      r"^verdict: OK: hybrid and dynamic caches agree"]),
    # Without --prefill-chunk a hybrid cache takes at most its window (8
    # here) per step; the baseline is given the same passes.
    (["--shape", "tiny-mistral", "--dtype", "fp32", "--eager"],
     [r"prefill in passes of 8 tokens \(both runs\); fused decoder layers$",
      r"^verdict: OK: hybrid and dynamic caches agree"]),
    # The plain decoder path, asked for, on Gemma 3's layers.
    (["--shape", "tiny-gemma3", "--dtype", "fp32", "--path", "plain"],
     [r"\(both runs\); plain decoder layers$",
      r"^tokens vs dynamic: identical$",
      r"^verdict: OK: hybrid and dynamic caches agree"]),
    # Sampling: the same seed draws the same tokens from the same logits.
    (["--shape", "tiny", "--dtype", "fp32", "--temperature", "0.8", "--top-k", "20"],
     [r"sampling; prefill in one pass \(both runs\); fused decoder layers$",
      r"^verdict: OK: static and dynamic caches agree"]),
]


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    demo = sys.argv[1]
    failed = 0
    for args, patterns in CASES:
        command = [demo, *COMMON, *args]
        run = subprocess.run(command, capture_output=True, text=True, timeout=300)
        problems = [] if run.returncode == 0 else [f"exit status {run.returncode}, expected 0"]
        for pattern in patterns:
            if not re.search(pattern, run.stdout, re.MULTILINE):
                problems.append(f"no line matches {pattern!r}")
        print(f"{'FAIL' if problems else 'ok  '} {' '.join(command[1:])}")
        for line in run.stdout.splitlines():
            if line.startswith(("logits vs", "tokens vs", "verdict")):
                print(f"       {line}")
        if problems:
            failed += 1
            for p in problems:
                print(f"  {p}")
            print(f"  stdout:\n{run.stdout}\n  stderr:\n{run.stderr}")
    print(f"\n{len(CASES) - failed} of {len(CASES)} demo runs gave the expected verdict")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
