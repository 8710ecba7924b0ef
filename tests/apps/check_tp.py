"""--tp N in statickv-demo and statickv-serve, as a user runs them
(docs/tensor_parallel.md): N ranks on this machine over 127.0.0.1, fp32 on the
CPU, one thread per rank.

usage: check_tp.py STATICKV_DEMO STATICKV_SERVE

- statickv-demo --print-ids prints the same greedy ids with --tp 1, --tp 2
  (kv heads split) and --tp 4 --vocab-parallel (kv heads replicated);
- statickv-serve --tp 2 answers the same requests (one of them replayed
  later with arrival_s, one cancelled) with the same tokens as --tp 1;
- what cannot be split or combined is refused, naming the flag or field.
"""

import json
import subprocess
import sys

COMMON = ["--shape", "tiny", "--device", "cpu", "--dtype", "fp32", "--threads", "1"]
TIMEOUT = 120


def run(args, stdin=""):
    done = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=TIMEOUT)
    return done.returncode, done.stdout, done.stderr


def demo_ids(demo, extra):
    args = [demo, *COMMON, "--batch", "3", "--prompt-len", "9", "--max-new-tokens", "8",
            "--print-ids", "--no-compare", "--eager", *extra]
    code, out, err = run(args)
    if code != 0:
        raise SystemExit(f"{' '.join(args)}: exit {code}\n{out}\n{err}")
    return [line for line in out.splitlines() if line and all(c.isdigit() or c == "," for c in line)]


def serve_tokens(serve, extra):
    lines = [{"id": f"r{i}", "prompt": p, "max_new_tokens": 6}
             for i, p in enumerate([[5, 9, 14, 2, 77], [11, 4], [90, 13, 27, 6, 55, 3, 8]])]
    lines.append({"id": "late", "prompt": [7, 7, 7], "max_new_tokens": 4, "arrival_s": 0.3})
    lines.append({"id": "gone", "prompt": [1, 2, 3], "max_new_tokens": 4, "arrival_s": 60})
    lines.append({"cancel": "gone"})
    args = [serve, *COMMON, "--max-batch", "2", "--max-len", "64", *extra]
    code, out, err = run(args, "".join(json.dumps(line) + "\n" for line in lines))
    if code != 0:
        raise SystemExit(f"{' '.join(args)}: exit {code}\n{out}\n{err}")
    replies = {}
    for line in out.splitlines():
        reply = json.loads(line)
        replies[reply["id"]] = (reply["finish"], reply["tokens"])
    if len(replies) != 5 or replies["gone"][0] != "cancelled":
        raise SystemExit(f"{' '.join(args)}: expected 5 replies, 'gone' cancelled, got {replies}")
    return replies


def refused(args, parts):
    code, out, err = run(args)
    if code == 0 or not all(part in err for part in parts):
        raise SystemExit(f"{' '.join(args)}: expected a failure naming {parts}, got exit {code}\n"
                         f"{out}\n{err}")


def main(demo, serve):
    single = demo_ids(demo, [])
    if len(single) != 3:
        raise SystemExit(f"statickv-demo --print-ids: expected 3 rows of ids, got {single}")
    for extra in (["--tp", "2"], ["--tp", "4", "--vocab-parallel", "--tp-check"]):
        if demo_ids(demo, extra) != single:
            raise SystemExit(f"statickv-demo {' '.join(extra)}: ids differ from --tp 1")
    print("statickv-demo: --tp 2 and --tp 4 --vocab-parallel print --tp 1's ids")

    if serve_tokens(serve, ["--tp", "2", "--tp-check"]) != serve_tokens(serve, []):
        raise SystemExit("statickv-serve --tp 2: tokens differ from --tp 1")
    print("statickv-serve: --tp 2 answers as --tp 1")

    refused([demo, *COMMON, "--vocab-parallel"], ["--vocab-parallel: expected --tp N > 1"])
    refused([demo, *COMMON, "--tp", "2", "--save-prompt", "/tmp/x.bin"],
            ["--save-prompt: expected no prompt-cache file with --tp"])
    # 4 query heads do not split 3 ways: every rank says so and exits non-zero.
    refused([demo, *COMMON, "--tp", "3"],
            ["ModelConfig.num_attention_heads: expected a multiple of the tensor-parallel world "
             "size 3 but got 4", "rank 0 exited with status 2"])
    print("refusals: --vocab-parallel without --tp, --tp with --save-prompt, --tp 3 of 4 heads")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
