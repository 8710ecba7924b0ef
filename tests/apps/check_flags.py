"""Runs statickv's programs with flags they cannot honour and requires each
to refuse: exit status 2, nothing on stdout, and one line on stderr that
starts with the program's name and names the flag and the value.

usage: check_flags.py NAME=PATH...   (NAME: a CMake target, e.g. statickv-demo)

Programs not given (not built) are skipped; their cases are not counted.
"""

import subprocess
import sys

# (program, arguments, substrings the error message must contain)
CASES = [
    # statickv-demo: the acceptance list of issue #12, then one case per kind of check.
    # Tensor parallelism (model_flags.hpp: one home for both programs).
    ("statickv-demo", ["--tp", "0"], ["--tp: expected an integer in [1, 64] but got 0"]),
    ("statickv-demo", ["--vocab-parallel"], ["--vocab-parallel: expected --tp N > 1"]),
    ("statickv-demo", ["--tp-check"], ["--tp-check: expected --tp N > 1"]),
    ("statickv-serve", ["--tp", "65"], ["--tp: expected an integer in [1, 64] but got 65"]),
    ("statickv-serve", ["--vocab-parallel"], ["--vocab-parallel: expected --tp N > 1"]),
    ("statickv-demo", ["--tp", "2", "--speculate", "2"],
     ["--speculate: expected --speculate 0 with --tp 2", "got --speculate 2"]),
    ("statickv-demo", ["--temperature", "1e999"],
     ["--temperature: expected a finite number >= 0 but got 1e999"]),
    ("statickv-demo", ["--temperature", "0.5garbage"],
     ["--temperature: expected a finite number >= 0 but got '0.5garbage'"]),
    ("statickv-demo", ["--temperature", "-1"],
     ["--temperature: expected a finite number >= 0 but got -1"]),
    ("statickv-demo", ["--temperature", "nan"],
     ["--temperature: expected a finite number >= 0 but got nan"]),
    ("statickv-demo", ["--temperature", "inf"], ["--temperature:", "got inf"]),
    ("statickv-demo", ["--top-k", "-3"], ["--top-k: expected an integer >= 0 but got -3"]),
    ("statickv-demo", ["--top-k", "0.5garbage"], ["--top-k: expected an integer", "'0.5garbage'"]),
    ("statickv-demo", ["--prefill-chunk", "-5"],
     ["--prefill-chunk: expected an integer >= 0 but got -5"]),
    ("statickv-demo", ["--top-k", "5"], ["--top-k: expected 0 without sampling", "got 5"]),
    ("statickv-demo", ["--batch", "0"], ["--batch: expected an integer >= 1 but got 0"]),
    ("statickv-demo", ["--rounds", "-1"], ["--rounds: expected an integer >= 0 but got -1"]),
    ("statickv-demo", ["--no-compare", "--rounds", "2"],
     ["--rounds: expected 0 with --no-compare", "got 2"]),
    ("statickv-demo", ["--cache", "dynamic", "--rounds", "2"],
     ["--rounds: expected 0 with --cache dynamic", "got 2"]),
    ("statickv-demo", ["--max-new-tokens", "99999999999999999999"],
     ["--max-new-tokens: expected an integer >= 1 but got 99999999999999999999 (too large)"]),
    ("statickv-demo", ["--max-new-tokens", "100000"],
     ["--max-new-tokens: expected at most", "max_position_embeddings=256", "got 100000"]),
    ("statickv-demo", ["--prompt-len", "300"], ["--prompt-len:", "max_position_embeddings=256"]),
    ("statickv-demo", ["--seed", "-1"], ["--seed: expected an integer >= 0 but got -1"]),
    ("statickv-demo", ["--seed", " 1"], ["--seed: expected an integer", "' 1'"]),
    ("statickv-demo", ["--shape", "llama-9"], ["--shape: expected tiny,", "got 'llama-9'"]),
    ("statickv-demo", ["--device", "gpu"], ["--device: expected auto, cpu or cuda but got 'gpu'"]),
    ("statickv-demo", ["--dtype", "fp8"], ["--dtype: expected fp32,", "got 'fp8'"]),
    ("statickv-demo", ["--load-prompt", "no-such-prompt.safetensors"],
     ["--load-prompt: expected an existing file but got 'no-such-prompt.safetensors'"]),
    ("statickv-demo", ["--save-prompt", "p.safetensors", "--cache", "dynamic"],
     ["--save-prompt: expected a static or hybrid --cache", "got dynamic"]),
    ("statickv-demo", ["--save-prompt", "p.safetensors", "--kv-dtype", "int8"],
     ["--kv-dtype: expected compute with --save-prompt", "got int8"]),
    ("statickv-demo", ["--kv-dtype", "fp8", "--cache", "dynamic"],
     ["--kv-dtype: expected compute with --cache dynamic", "got fp8"]),
    ("statickv-demo", ["--kv-dtype", "int4"], ["--kv-dtype: expected compute, int8 or fp8"]),
    ("statickv-serve", ["--kv-dtype", "int4"], ["--kv-dtype: expected compute, int8 or fp8"]),
    ("statickv-serve", ["--prefix-cache-bytes", "-2"],
     ["--prefix-cache-bytes: expected an integer >= -1 but got -2"]),
    ("statickv-serve", ["--prefix-cache-bytes", "1000", "--kv-dtype", "int8"],
     ["--prefix-cache-bytes: expected 0 or -1 with --kv-dtype int8", "got 1000"]),
    ("statickv-serve", ["--prefix-cache-bytes", "1000", "--speculate", "2", "--draft-shape",
                        "tiny"],
     ["--prefix-cache-bytes: expected 0 or -1 with a draft model", "got 1000"]),
    ("statickv-serve", ["--prefix-cache-bytes", "1000", "--tp", "2"],
     ["--prefix-cache-bytes: expected 0 or -1 with --tp 2", "got 1000"]),
    ("statickv-demo", ["--top-p", "0.9"], ["--top-p: expected 1 without sampling", "got 0.9"]),
    ("statickv-demo", ["--top-p", "1.5", "--temperature", "1"], ["--top-p: expected a finite number in",
                                                                  "got 1.5"]),
    # statickv-serve --http (docs/serving.md, "HTTP API")
    ("statickv-serve", ["--max-queue", "4"], ["--max-queue: expected --http with it"]),
    ("statickv-serve", ["--api-key", "k"], ["--api-key: expected --http with it"]),
    ("statickv-serve", ["--http", "127.0.0.1:99999"],
     ["--http: expected HOST:PORT or PORT with PORT in [0, 65535]", "127.0.0.1:99999"]),
    ("statickv-serve", ["--http", "host:port"], ["--http: expected HOST:PORT or PORT", "host:port"]),
    ("statickv-serve", ["--http", "0", "--tp", "2"],
     ["--http: expected no --tp with --http", "--tp 2"]),
    ("statickv-serve", ["--http", "0", "--http-threads", "16", "--max-batch", "8"],
     ["--max-queue: expected at most --http-threads - --max-batch = 8", "got 64"]),
    ("statickv-serve", ["--http", "0", "--http-threads", "0"],
     ["--http-threads: expected an integer >= 1 but got 0"]),
    ("statickv-demo", ["--save-prompt", "p.safetensors", "--batch", "2"],
     ["--save-prompt: expected a single prompt but got 2"]),
    ("statickv-demo", ["--save-prompt", "/no-such-dir/p.safetensors"], ["--save-prompt:"]),
    ("statickv-demo", ["--path", "turbo"], ["--path: expected auto, plain or fused",
                                            "got 'turbo'"]),
    ("statickv-demo", ["--path", "fused", "--tp", "2"],
     ["--path: expected plain or auto with --tp 2", "got fused"]),
    ("statickv-demo", ["--path", "fused", "--cache", "dynamic"],
     ["--path: expected plain or auto with --cache dynamic", "got fused"]),
    ("statickv-demo", ["--path", "fused", "--kv-dtype", "int8"],
     ["--path: expected plain or auto with --kv-dtype int8", "got fused"]),
    ("statickv-demo", ["--cache", "paged"], ["--cache: expected static, hybrid or dynamic",
                                             "got 'paged'"]),
    ("statickv-demo", ["--shape", "tiny-mistral", "--cache", "static"],
     ["--cache: expected hybrid or dynamic", "got static"]),
    ("statickv-demo", ["--prompt-ids", "1,x"], ["--prompt-ids: expected an integer >= 0",
                                                "'x'"]),
    ("statickv-demo", ["--prompt-ids", "1,,2"], ["--prompt-ids: expected an integer", "''"]),
    ("statickv-demo", ["--prompt-ids", "1;;2"], ["--prompt-ids:", "prompt 1 has none"]),
    ("statickv-demo", ["--prompt-ids", "5,999999"],
     ["--prompt-ids: expected token ids in [0, vocab_size=", "999999"]),
    ("statickv-demo", ["--prompt-ids", "1,2", "--batch", "3"], ["--batch: expected no value"]),
    ("statickv-demo", ["--checkpoint", "/nonexistent", "--shape", "tiny"], ["--shape:"]),
    ("statickv-demo", ["--eager=1"], ["--eager: expected no value", "'1'"]),
    ("statickv-demo", ["--max-new-tokens"], ["--max-new-tokens: expected a value but got none"]),
    ("statickv-demo", ["--temperature", "--top-k"], ["--temperature: expected a value",
                                                     "'--top-k'"]),
    ("statickv-demo", ["--bogus", "1"], ["unknown flag '--bogus'"]),
    ("statickv-demo", ["stray"], ["unexpected argument 'stray'"]),
    ("statickv-demo", ["--temperature=abc"], ["--temperature:", "'abc'"]),
    ("statickv-demo", ["--prompt-ids", ""], ["--prompt-ids: expected a value but got ''"]),
    # Text prompts (--prompt, --prompts-file, --chat).
    ("statickv-demo", ["--prompt", "Hi"], ["--prompt: expected --checkpoint DIR"]),
    ("statickv-demo", ["--chat"], ["--chat: expected --prompt or --prompts-file"]),
    ("statickv-demo", ["--prompt", "Hi", "--prompt-ids", "1,2"],
     ["--prompt-ids: expected no ids with --prompt"]),
    ("statickv-demo", ["--prompt", "Hi", "--batch", "2"], ["--batch: expected no value"]),
    ("statickv-demo", ["--prompt", ""], ["--prompt: expected a value but got ''"]),
    ("statickv-demo", ["--prompts-file", "/nonexistent/prompts.txt"],
     ["--prompts-file: expected a readable file", "/nonexistent/prompts.txt"]),
    ("statickv-demo", ["--checkpoint", "/nonexistent", "--prompt", "Hi"],
     ["--checkpoint: expected a tokenizer there", "/nonexistent"]),
    ("statickv-demo", ["--json", "/nonexistent/dir/out.json"],
     ["--json: expected a file in an existing folder", "/nonexistent/dir/out.json"]),
    # statickv_bench_decode
    ("statickv_bench_decode", ["--rounds", "0"], ["--rounds: expected an integer >= 1 but got 0"]),
    ("statickv_bench_decode", ["--calls", "3x"], ["--calls: expected an integer >= 1", "'3x'"]),
    ("statickv_bench_decode", ["--threads", "-1"], ["--threads: expected an integer >= 0",
                                                    "got -1"]),
    ("statickv_bench_decode", ["--rounds", "4294967297"],
     ["--rounds: expected an integer >= 1 but got 4294967297 (too large)"]),
    ("statickv_bench_decode", ["--heads", "30"], ["--heads: expected a multiple of --kv-heads=8",
                                                  "got 30"]),
    ("statickv_bench_decode", ["--context", "4096"], ["--context: expected a value in [1, "
                                                      "max_len=4096) but got 4096"]),
    ("statickv_bench_decode", ["--dtype", "half"], ["--dtype:", "'half'"]),
    ("statickv_bench_decode", ["--json", "/nonexistent/dir/out.json"],
     ["--json: expected a file in an existing folder", "/nonexistent/dir/out.json"]),
    # statickv_bench_memory
    ("statickv_bench_memory", ["--max-len", "0"], ["--max-len: expected an integer >= 1",
                                                   "got 0"]),
    ("statickv_bench_memory", ["--max-chunk", "abc"], ["--max-chunk: expected an integer",
                                                       "'abc'"]),
    ("statickv_bench_memory", ["--max-len", "64", "--max-chunk", "128"],
     ["--max-chunk: expected at most max_len=64 but got 128"]),
    ("statickv_bench_memory", ["--max-batch", "-2"], ["--max-batch:", "got -2"]),
    # statickv_bench_write
    ("statickv_bench_write", ["--batches", "1,,16"], ["--batches: expected comma-separated",
                                                      "'1,,16'"]),
    ("statickv_bench_write", ["--batches", "0,4"], ["--batches: expected an integer >= 1",
                                                    "got 0"]),
    ("statickv_bench_write", ["--window", "0"], ["--window: expected an integer >= 1", "got 0"]),
    ("statickv_bench_write", ["--calls", "2.5"], ["--calls: expected an integer", "'2.5'"]),
    # statickv_bench_context
    ("statickv_bench_context", ["--contexts", "1"], ["--contexts: expected an integer in [2, 4096]",
                                                     "got 1"]),
    ("statickv_bench_context", ["--max-len", "256", "--contexts", "128,512"],
     ["--contexts: expected an integer in [2, 256] but got 512"]),
    ("statickv_bench_context", ["--contexts="], ["--contexts: expected a value but got ''"]),
    ("statickv_bench_context", ["--graphs", "--device", "cpu"],
     ["--graphs: expected a CUDA device", "cpu"]),
    ("statickv_bench_context", ["--graphs=yes"], ["--graphs: expected no value", "'yes'"]),
    # statickv_bench_linear
    ("statickv_bench_linear", ["--arms", "gemm,mkl"],
     ["--arms: expected names among gemm, onednn, stream, bf16 but got 'mkl'"]),
    ("statickv_bench_linear", ["--rows", "0"], ["--rows:", "got 0"]),
    ("statickv_bench_linear", ["--rounds", "0"], ["--rounds: expected an integer >= 1"]),
    # statickv_bench_model
    ("statickv_bench_model", ["--shape", "tiny-mistral"], ["--shape: expected", "small",
                                                           "'tiny-mistral'"]),
    ("statickv_bench_step", ["--shape", "tiny,tiny-llama"],
     ["--shape: expected names of", "tiny-qwen3", "but got 'tiny-llama'"]),
    ("statickv_bench_step", ["--shape", "tiny:0"], ["--shape: expected an integer >= 1 but got 0"]),
    ("statickv_bench_step", ["--batch", "1,,2"], ["--batch: expected comma-separated integers"]),
    ("statickv_bench_model", ["--context", "0"], ["--context: expected an integer >= 1",
                                                  "got 0"]),
    ("statickv_bench_model", ["--context", "64", "--max-len", "64"],
     ["--context: expected a value in [1, max_len=64) but got 64"]),
    ("statickv_bench_model", ["--max-batch", "0"], ["--max-batch: expected an integer >= 1"]),
    # statickv_bench_prompts
    ("statickv_bench_prompts", ["--prompts", "0"], ["--prompts: expected an integer >= 1"]),
    ("statickv_bench_prompts", ["--reps", "-1"], ["--reps: expected an integer >= 1",
                                                  "got -1"]),
    ("statickv_bench_prompts", ["--max-len", "1"], ["--max-len: expected 0", ">= 2 but got 1"]),
    ("statickv_bench_prompts", ["--seed", "1e3"], ["--seed: expected an integer", "'1e3'"]),
    # speculative decoding (model_flags.hpp: the same checks in both programs)
    ("statickv-demo", ["--speculate", "-1"], ["--speculate: expected an integer >= 0 but got -1"]),
    ("statickv-demo", ["--speculate", "2", "--cache", "dynamic"],
     ["--speculate: expected --cache static or hybrid", "got --cache dynamic"]),
    ("statickv-demo", ["--draft-shape", "tiny"],
     ["--draft-shape: expected --speculate N >= 1", "got --speculate 0"]),
    ("statickv-demo", ["--speculate", "2", "--draft-shape", "tiny", "--draft-checkpoint", "d"],
     ["--draft-shape: expected no --draft-shape with --draft-checkpoint"]),
    ("statickv-demo", ["--shape", "tiny-mistral", "--speculate", "8"],
     ["--speculate: expected N + 1 <= 8", "--prefill-chunk", "got --speculate 8"]),
    ("statickv-demo", ["--draft-shape", "llama-9"], ["--draft-shape: expected tiny,"]),
    # statickv-serve
    ("statickv-serve", ["--speculate", "2", "--draft-shape", "llama-9"],
     ["--draft-shape: expected tiny,"]),
    ("statickv-serve", ["--speculate", "2", "--draft-shape", "smollm2-135m"],
     ["--draft-shape: expected a draft model with the target's vocab_size=128", "got 49152"]),
    ("statickv-serve", ["--draft-checkpoint", "d"],
     ["--draft-checkpoint: expected --speculate N >= 1", "got --speculate 0"]),
    ("statickv-serve", ["--speculate", "8", "--prefill-chunk", "4"],
     ["--speculate: expected N + 1 <= 4", "got --speculate 8"]),
    ("statickv-serve", ["--max-batch", "0"], ["--max-batch: expected an integer >= 1 but got 0"]),
    ("statickv-serve", ["--max-len", "1"], ["--max-len: expected an integer in [2, 256]",
                                            "max_position_embeddings", "got 1"]),
    ("statickv-serve", ["--max-len", "300"], ["--max-len: expected an integer in [2, 256]",
                                              "got 300"]),
    ("statickv-serve", ["--cache", "dynamic"], ["--cache: expected static or hybrid",
                                                "got 'dynamic'"]),
    ("statickv-serve", ["--shape", "tiny-qwen2", "--cache", "static"],
     ["--cache: expected hybrid", "got static"]),
    ("statickv-serve", ["--max-batch", "4", "--token-budget", "2"],
     ["--token-budget: expected 0 or at least --max-batch=4", "got 2"]),
    ("statickv-serve", ["--max-batch", "4", "--burst-budget", "3"],
     ["--burst-budget: expected 0 or at least --max-batch=4", "got 3"]),
    ("statickv-serve", ["--max-batch", "4", "--token-budget", "40", "--burst-budget", "20"],
     ["--burst-budget: expected 0 or at least the token budget, 40", "got 20"]),
    ("statickv-serve", ["--gather-ms", "5"],
     ["--gather-ms: expected --http with it"]),
    ("statickv-serve", ["--http", "127.0.0.1:0", "--gather-ms", "60001"],
     ["--gather-ms: expected at most 60000", "got 60001"]),
    ("statickv-serve", ["--max-len", "128", "--prefill-chunk", "500"],
     ["--prefill-chunk: expected at most --max-len=128 but got 500"]),
    ("statickv-serve", ["--prefill-chunk", "-1"], ["--prefill-chunk: expected an integer >= 0"]),
    ("statickv-serve", ["--checkpoint", "/nonexistent"], ["--checkpoint: expected a directory",
                                                          "'/nonexistent'"]),
    ("statickv-serve", ["--checkpoint", "/nonexistent", "--shape", "tiny"], ["--shape:"]),
    ("statickv-serve", ["--device", "gpu"], ["--device: expected auto, cpu or cuda"]),
    ("statickv-serve", ["--dtype", "fp8"], ["--dtype: expected fp32,", "got 'fp8'"]),
    ("statickv-serve", ["--eager=1"], ["--eager: expected no value", "'1'"]),
    ("statickv-serve", ["--eager", "--buckets"], ["--buckets: expected no --buckets with --eager"]),
    ("statickv-serve", ["--threads", "x"], ["--threads: expected an integer", "'x'"]),
    ("statickv-serve", ["--fit-threads", "--tp", "2"],
     ["--fit-threads: expected --tp 1", "got --tp 2"]),
    ("statickv-serve", ["--max-batch"], ["--max-batch: expected a value but got none"]),
    # statickv_bench_serving
    ("statickv_bench_serving", ["--rate", "-1"], ["--rate: expected a finite number >= 0",
                                                  "got -1"]),
    ("statickv_bench_serving", ["--requests", "0"], ["--requests: expected an integer >= 1"]),
    ("statickv_bench_serving", ["--max-len", "100"],
     ["--max-len: expected at least --max-prompt + --max-new = 384 but got 100"]),
    ("statickv_bench_serving", ["--shape", "tiny-qwen2"], ["--shape: expected", "'tiny-qwen2'"]),
    ("statickv_bench_serving", ["--trace-out", ""], ["--trace-out: expected a value but got ''"]),
    # statickv_bench_speculative
    ("statickv_bench_speculative", ["--max-new", "1"], ["--max-new: expected an integer >= 2"]),
    ("statickv_bench_speculative", ["--shape", "tiny-qwen2"], ["--shape: expected", "'tiny-qwen2'"]),
]

# pytorch-tokenizers' module prints this as a program linking statickv::tokenizer
# starts (reference/text/include/statickv/text/tokenizer.hpp); it is
# not the program's own message.
TOKENIZER_BANNER = "Registering override fallback regex"


def main():
    programs = dict(arg.split("=", 1) for arg in sys.argv[1:])
    if not programs:
        raise SystemExit(__doc__)
    failures, ran = [], 0
    for program, args, expected in CASES:
        if program not in programs:
            continue
        ran += 1
        command = [programs[program], *args]
        run = subprocess.run(command, capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL)
        problems = []
        if run.returncode != 2:
            problems.append(f"exit status {run.returncode}, expected 2")
        if run.stdout:
            problems.append("wrote to stdout (it should refuse before any work)")
        lines = [line for line in run.stderr.strip().splitlines()
                 if TOKENIZER_BANNER not in line]
        if len(lines) != 1 or not lines[0].startswith(program + ": "):
            problems.append("expected one stderr line starting with the program's name")
        for text in expected:
            if text not in run.stderr:
                problems.append(f"stderr lacks {text!r}")
        status = "FAIL" if problems else "ok  "
        print(f"{status} {program} {' '.join(args)}\n       {run.stderr.strip()}")
        if problems:
            failures.append((command, problems, run))
    for command, problems, run in failures:
        print(f"\nFAILED: {' '.join(command)}")
        for p in problems:
            print(f"  {p}")
        print(f"  stdout: {run.stdout.strip()[:2000]}\n  stderr: {run.stderr.strip()[:2000]}")
    skipped = sorted(set(p for p, _, _ in CASES) - set(programs))
    print(f"\n{ran - len(failures)} of {ran} cases refused as expected"
          + (f"; not built, skipped: {', '.join(skipped)}" if skipped else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
