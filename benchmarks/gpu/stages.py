#!/usr/bin/env python3
"""The GPU run's stages (benchmarks/gpu/run_gpu.sh): each one's tier, its
planned seconds, and the sources whose content decides its result, so a
second attempt skips what a first one already measured
(benchmarks/gpu/README.md, "Resuming").

  stages.py manifest OUT                 writes the manifest prep.sh sends
                                         along: the commit and a hash of each
                                         stage's sources
  stages.py hash STAGE [--manifest M]    the stage's source hash (from the
                                         manifest when given, else computed
                                         from the working tree)
  stages.py status --results DIR [--manifest M] [--dry-run]
                                         one line a stage: NAME HASH done
                                         WHERE, when a committed summary in
                                         DIR (*.jsonl) ran it to exit 0 at
                                         that hash (a dry run's summaries
                                         count only for a dry run), else
                                         NAME HASH pending
  stages.py plan [--check SECONDS]       prints each stage's tier and planned
                                         seconds; --check: exit 1 unless tier 1
                                         (the first attempt) sums to at most
                                         SECONDS

A stage's hash covers every file under its sources (paths relative to the
repository root, directories walked, sorted) by path and content, plus the
stage's name. The library, the reference decoder and the build files are
in every stage's sources; each adds its own benchmark, tests or scripts.
"""

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What every stage's binary is built from.
COMMON = ["CMakeLists.txt", "cmake", "include", "src", "reference", "flags",
          "benchmarks/gpu/build.sh"]
BENCH = ["benchmarks/CMakeLists.txt", "benchmarks/bench_util.hpp", "benchmarks/bench_model.hpp"]
CUDA_TESTS = ["tests/CMakeLists.txt", "tests/cuda", "tests/support", "tests/support.hpp",
              "tests/main.cpp"]
HF = ["apps", "benchmarks/hf_compare.py", "benchmarks/hf_compare_parts"]

# name: (tier, planned seconds, its own sources). Tiers are attempts
# (benchmarks/gpu/README.md): 1 fits the first attempt of 400 s with 60 s of slack (the
# build, the kernels checked, the [cuda] tests, the chained step with its
# kernel inventory, the pick alone, compute-sanitizer on the new kernels);
# 2 the second (the arms side by side, serving, context length, the
# quantized Python caches, offload); 3 the rest while time is left.
# Planned seconds: what the stage took on the H200, or is expected to take,
# not its timeout.
STAGES = {
    "build": (1, 80, ["tests", "apps", "aoti", "benchmarks"]),
    # Note [kernel switches]: each kernel's own [cuda] tests, one kernel at
    # a time; a failing one is switched off for every later stage.
    "kernel_checks": (1, 20, CUDA_TESTS + ["benchmarks/gpu/kernel_checks.sh"]),
    "cuda_tests": (1, 30, CUDA_TESTS),
    # Note [chained step]: the figure the decode issues measure against,
    # with the batch-1 step's kernel inventory.
    "chained": (1, 70, BENCH + ["benchmarks/chained_decode.cpp"]),
    "chained_8b": (1, 45, BENCH + ["benchmarks/chained_decode.cpp"]),
    "pick": (1, 15, BENCH + ["benchmarks/pick.cpp"]),
    "memcheck": (1, 60, CUDA_TESTS),
    # The chained step arm against arm on one checkpoint: transformers'
    # compiled static cache, a gpt-fast-style model file, statickv.
    "chained_arms": (2, 150, BENCH + ["benchmarks/chained_arms.py", "benchmarks/chained_decode.cpp",
                                      "benchmarks/hf_compare_parts"]),
    "tp_cuda_tests": (2, 10, ["tests/CMakeLists.txt", "tests/tp"]),
    "model_decode": (2, 15, BENCH + ["benchmarks/model.cpp"]),
    "hf_roofline": (2, 140, HF),
    "context_length": (2, 40, BENCH + ["benchmarks/context.cpp"]),
    "serving": (2, 60, BENCH + ["benchmarks/serving.cpp", "benchmarks/serving_trace.hpp"]),
    "serving_sampled": (2, 60, BENCH + ["benchmarks/serving.cpp", "benchmarks/serving_trace.hpp"]),
    "offload": (2, 60, BENCH + ["benchmarks/offload.cpp"]),
    "hf_quantized": (2, 60, ["python", "tests/python/test_hf_quantized.py",
                             "tests/python/conftest.py"]),
    "step_ops": (3, 120, BENCH + ["benchmarks/step.cpp"]),
    "model_decode_8b": (3, 45, BENCH + ["benchmarks/model.cpp"]),
    "smollm2_decode_b8": (3, 30, BENCH + ["benchmarks/model.cpp"]),
    "smollm2_decode_b64": (3, 30, BENCH + ["benchmarks/model.cpp"]),
    "prompt_lengths": (3, 60, BENCH + ["benchmarks/prompts.cpp"]),
    "write_cost": (3, 20, BENCH + ["benchmarks/write.cpp"]),
    "decode_step": (3, 20, BENCH + ["benchmarks/decode.cpp"]),
    "memory": (3, 5, BENCH + ["benchmarks/memory.cpp"]),
    "aoti": (3, 120, ["aoti", "python", "examples/aoti", "benchmarks/aoti.cpp",
                      "benchmarks/gpu/aoti.sh", "tests/reference/hf/make_reference.py"]),
    "hf_serving": (3, 90, ["benchmarks/hf_serving.py", "benchmarks/serving.cpp"]),
    "hf_compare": (3, 180, HF),
    "hf_seeds": (3, 180, ["python", "benchmarks/hf_compare.py", "benchmarks/hf_compare_parts"]),
    "memcheck_all": (3, 110, CUDA_TESTS),
}


def files_of(root, paths):
    """Every file under `paths` (relative to root), sorted; missing ones skipped."""
    out = []
    for rel in paths:
        p = root / rel
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            out.extend(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts
                       and not f.name.endswith((".pyc", ".so")) and ".egg-info" not in str(f))
    return sorted(set(out))


def source_hash(stage, root=ROOT):
    if stage not in STAGES:
        raise SystemExit(f"stages.py: expected a stage of {', '.join(STAGES)} but got {stage!r}")
    h = hashlib.sha256(stage.encode())
    for f in files_of(root, COMMON + STAGES[stage][2]):
        h.update(str(f.relative_to(root)).encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def git(*args, root=ROOT):
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def commit(root=ROOT):
    return git("rev-parse", "HEAD", root=root)


def tree_hash(root=ROOT):
    """One hash of every stage's sources: what the GPU machine compares
    with the manifest's to tell whether the tree it got is prep.sh's."""
    h = hashlib.sha256()
    for stage in sorted(STAGES):
        h.update(source_hash(stage, root).encode())
    return h.hexdigest()[:16]


def manifest(root=ROOT):
    return {"commit": commit(root), "describe": git("describe", "--always", "--dirty", root=root),
            "tree": tree_hash(root), "stages": {s: source_hash(s, root) for s in STAGES}}


def hash_of(stage, manifest_path):
    """The manifest's hash of `stage`; where the working tree no longer
    matches it (sources changed after prep.sh), the tree's, with a warning."""
    live = source_hash(stage)
    if manifest_path and Path(manifest_path).is_file():
        sent = json.loads(Path(manifest_path).read_text()).get("stages", {}).get(stage)
        if sent and sent != live:
            print(f"stages.py: {stage}: the working tree's sources hash to {live}, not the "
                  f"manifest's {sent} (changed after prep.sh); using {live}", file=sys.stderr)
    return live


def done(stage, results, want, dry_run=False):
    """The committed summary that ran `stage` to exit 0 at hash `want` (a
    dry run's only for a dry run), or None."""
    for path in sorted(Path(results).glob("*.jsonl")):
        for text in path.read_text().splitlines():
            try:
                line = json.loads(text)
            except ValueError:
                continue
            if (line.get("stage") == stage and line.get("exit") == 0 and "skipped" not in line
                    and line.get("sources_hash") == want
                    and bool(line.get("dry_run", False)) == dry_run):
                return path
    return None


def plan(check):
    """Prints every stage's tier and planned seconds; with `check`, 1 when
    the first attempt's stages (tier 1) plan more than `check` seconds."""
    total = 0
    for name, (tier, seconds, _) in STAGES.items():
        print(f"tier {tier}  {seconds:4d} s  {name}")
        if tier == 1:
            total += seconds
    print(f"tier 1 (the first attempt): {total} s planned" + (f" (at most {check})" if check else ""))
    return 1 if check and total > check else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("manifest")
    m.add_argument("out")
    h = sub.add_parser("hash")
    h.add_argument("stage")
    h.add_argument("--manifest")
    d = sub.add_parser("status")
    d.add_argument("--results", required=True)
    d.add_argument("--manifest")
    d.add_argument("--dry-run", action="store_true")
    p = sub.add_parser("plan")
    p.add_argument("--check", type=int, default=0)
    args = parser.parse_args()
    if args.command == "manifest":
        Path(args.out).write_text(json.dumps(manifest(), indent=1) + "\n")
        print(f"wrote {args.out}")
    elif args.command == "hash":
        print(hash_of(args.stage, args.manifest))
    elif args.command == "status":
        for stage in STAGES:
            want = hash_of(stage, args.manifest)
            found = done(stage, args.results, want, args.dry_run)
            print(f"{stage} {want} done {found}" if found else f"{stage} {want} pending")
    else:
        sys.exit(plan(args.check))


if __name__ == "__main__":
    main()
