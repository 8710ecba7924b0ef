"""Prompt caching across processes: statickv-demo --save-prompt in one
process, --load-prompt in another, on the tiny shapes (an all-full and a
sliding-window model). The second run restores the saved prefix, prefills
only the rest, and generates exactly the ids of a run without the file; a
file whose ids are not a prefix of the prompt, or that was saved for other
weights, is refused.

usage: check_prompt_cache.py DEMO_EXE
"""

import os
import re
import subprocess
import sys
import tempfile

PREFIX = list(range(3, 23))  # 20 tokens
REST = [7, 1, 9, 4, 4, 2, 8, 30, 31, 5]


def ids(tokens):
    return ",".join(str(t) for t in tokens)


def run(demo, shape, prompt, *extra):
    command = [demo, "--shape", shape, "--dtype", "fp32", "--device", "cpu", "--threads", "1",
               "--max-new-tokens", "12", "--ignore-eos", "--no-compare", "--print-ids",
               "--prompt-ids", ids(prompt), *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def generated(stdout):
    return stdout.strip().splitlines()[-1]


def check(shape, demo, folder):
    failures = []
    path = os.path.join(folder, shape + ".safetensors")
    rc, out, err = run(demo, shape, PREFIX, "--save-prompt", path)
    if rc != 0 or "saved 20 prompt tokens" not in out:
        return [f"{shape}: --save-prompt run failed (rc {rc}): {out}{err}"]
    for prompt, restored, prefilled in [(PREFIX + REST, 20, 10), (PREFIX, 19, 1)]:
        rc, plain, err = run(demo, shape, prompt)
        rc2, cached, err2 = run(demo, shape, prompt, "--load-prompt", path)
        line = f"restored {restored} tokens from {path} in "
        if rc != 0 or rc2 != 0 or line not in cached or f", prefilled {prefilled}\n" not in cached:
            failures.append(f"{shape}: expected '{line}' (rc {rc}, {rc2}): {cached}{err}{err2}")
        elif generated(cached) != generated(plain):
            failures.append(f"{shape}: ids differ: {generated(cached)} vs {generated(plain)}")
    rc, out, err = run(demo, shape, [1] + PREFIX, "--load-prompt", path)
    if rc == 0 or "prefix of the prompt" not in err:
        failures.append(f"{shape}: a file that is not a prefix was not refused: {out}{err}")
    rc, out, err = run(demo, shape, PREFIX + REST, "--load-prompt", path, "--seed", "3")
    if rc == 0 or "model_id" not in err:
        failures.append(f"{shape}: a file of other weights was not refused: {out}{err}")
    return failures


def main():
    demo = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as folder:
        for shape in ["tiny", "tiny-mistral"]:
            failures += check(shape, demo, folder)
    for failure in failures:
        print("FAIL", failure)
    print(f"{'no' if not failures else len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
