"""statickv-serve's protocol as a client sees it: JSON lines in, one line per
finished request out, exit status 0 at the end of input.

usage: check_serve.py STATICKV_SERVE STATICKV_DEMO [--eager | --buckets]   (passed to statickv-serve:
exact shapes, the CPU's default, or the bucketed GraphRunner)

- greedy tokens equal statickv-demo --print-ids for the same prompts (the
  same random-weight model; the demo runs them as one ragged batch);
- every refused line gets an "error" reply naming the field, with its id
  when it could be read, and the requests around it are served as usual;
- with --speculate 3 and a draft model (the target itself, or tiny-mistral)
  greedy tokens are unchanged and the acceptance rate is reported;
- a stop token ends a request and is kept; a request due later (arrival_s)
  and a waiting or running one can be cancelled; seeded sampling is reproducible;
- the sampling head's fields (logit_bias, penalties, logprobs, min_tokens,
  ignore_eos) are read, and refused by name when malformed.
"""

import json
import re
import subprocess
import sys

PROMPTS = [[5, 9, 14, 2, 77, 31, 8, 64, 3, 19, 42, 7, 1], [11, 4], [90, 13, 27, 6, 55],
           [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20], [100]]
NEW = 12


def field_named(message):
    """The request field an error message names: before its first ':', '['
    or '.', or the quoted name of an unknown field."""
    m = re.match(r".*unknown field '([^']*)'", message)
    return m.group(1) if m else re.split(r"[:\[.]", message, maxsplit=1)[0]


# (line, id in the reply, substrings of the error)
BAD = [
    ('{"id": "e1", "prompt": [], "max_new_tokens": 4}', "e1", ["prompt: expected at least one"]),
    ('{"id": "e2", "prompt": [1, 128], "max_new_tokens": 4}', "e2",
     ["prompt[1]: expected a token id in [0, vocab_size=128) but got 128"]),
    ('{"id": "e3", "prompt": [1, 2], "max_new_tokens": 255}', "e3",
     ["max_new_tokens: expected prompt length + max_new_tokens <= max_len=256", "2 + 255"]),
    ('{"id": "e4", "prompt": [1], "max_new_tokens": -3}', "e4", ["max_new_tokens: expected >= 1"]),
    ('{"id": "e5", "prompt": [1], "max_new_tokens": 2, "temperature": -1}', "e5",
     ["temperature: expected a number >= 0 (0 = greedy) but got -1"]),
    ('{"id": "e6", "prompt": [1], "max_new_tokens": 2, "top_k": -2, "temperature": 1}', "e6",
     ["top_k: expected an integer >= 0 (0 or -1 = no filter) but got -2"]),
    ('{"id": "e7", "prompt": [1], "max_new_tokens": 2, "seed": -1}', "e7",
     ["seed: expected an integer >= 0"]),
    ('{"id": "e8", "prompt": [1], "max_new_tokens": 2, "stop": [1, 999]}', "e8",
     ["stop[1]: expected a token id"]),
    ('{"id": "e9", "prompt": "hello", "max_new_tokens": 2}', "e9",
     ["prompt: expected an array of token ids"]),
    ('{"id": "e10", "prompt": [1.5], "max_new_tokens": 2}', "e10",
     ["prompt[0]: expected an integer but got 1.5"]),
    ('{"id": "e11", "prompt": [1]}', "e11", ["max_new_tokens: expected an integer"]),
    ('{"id": "e12", "prompt": [1], "max_new_tokens": 2, "tempreature": 1}', "e12",
     ["unknown field 'tempreature'"]),
    ('{"id": [1], "prompt": [1], "max_new_tokens": 2}', None,
     ["id: expected a string or an integer but got [1]"]),
    ('{"prompt": [1], "max_new_tokens": 2}', None,
     ["id: expected a string or an integer but got null"]),
    ('{"id": "e15", "prompt": [1', None, ["malformed JSON"]),
    ('[1, 2]', None, ["request: expected a JSON object"]),
    ('{"id": "e17", "text": "hi", "max_new_tokens": 2}', "e17", ["text: expected prompt"]),
    ('{"id": "e18", "prompt": [1], "text": "hi", "max_new_tokens": 2}', "e18",
     ["expected exactly one of prompt"]),
    ('{"id": "e19", "prompt": [1], "max_new_tokens": 2, "arrival_s": -1}', "e19",
     ["arrival_s: expected a number >= 0"]),
    ('{"id": "e20", "prompt": [1], "max_new_tokens": 2, "logit_bias": {"x": 1}}', "e20",
     ["logit_bias: expected token ids (decimal strings) as keys"]),
    ('{"id": "e21", "prompt": [1], "max_new_tokens": 2, "presence_penalty": "x"}', "e21",
     ["presence_penalty: expected a finite number"]),
    ('{"id": "e22", "prompt": [1], "max_new_tokens": 2, "logprobs": 21}', "e22",
     ["logprobs: expected -1 (none) or 0..20", "21"]),
]


def serve(exe, lines, extra=()):
    run = subprocess.run([exe, "--shape", "tiny", "--max-batch", "4", "--max-len", "256",
                          "--threads", "1", *extra],
                         input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise SystemExit(f"statickv-serve exited {run.returncode}: {run.stderr}")
    return [json.loads(line) for line in run.stdout.splitlines()]


def expected_tokens(demo):
    """statickv-demo's greedy tokens for PROMPTS: what every reply must equal."""
    ids = ";".join(",".join(map(str, p)) for p in PROMPTS)
    return [[int(t) for t in line.split(",")] for line in subprocess.run(
        [demo, "--shape", "tiny", "--prompt-ids", ids, "--max-new-tokens", str(NEW),
         "--no-compare", "--print-ids", "--dtype", "fp32", "--device", "cpu"],
        capture_output=True, text=True, check=True).stdout.splitlines()[-len(PROMPTS):]]


def request_lines(expected):
    """The JSON lines sent to statickv-serve: PROMPTS with bad lines between
    them, then stop, cancel, sampling, long, bias, logprobs and ignore_eos
    requests."""
    lines = []
    for i, p in enumerate(PROMPTS):
        lines.append(json.dumps({"id": i, "prompt": p, "max_new_tokens": NEW}))
        lines.append(BAD[i % len(BAD)][0])  # bad lines between the good ones
    lines += [b[0] for b in BAD[len(PROMPTS):]]
    stop = expected[0][3]
    lines += [json.dumps({"id": "stop", "prompt": PROMPTS[0], "max_new_tokens": NEW,
                          "stop": [stop]}),
              json.dumps({"id": "later", "prompt": [1, 2], "max_new_tokens": 4, "arrival_s": 30}),
              json.dumps({"cancel": "later"}),
              json.dumps({"id": "s1", "prompt": [3, 4], "max_new_tokens": 8, "temperature": 0.9,
                          "top_k": 20, "seed": 7}),
              json.dumps({"id": "s2", "prompt": [3, 4], "max_new_tokens": 8, "temperature": 0.9,
                          "top_k": 20, "seed": 7}),
              json.dumps({"id": "long", "prompt": [1], "max_new_tokens": 250}),
              json.dumps({"cancel": "long"}),
              json.dumps({"id": "bias", "prompt": [3, 4], "max_new_tokens": 5,
                          "logit_bias": {"42": 100}, "presence_penalty": 0.5,
                          "repetition_penalty": 1.2}),
              json.dumps({"id": "lp", "prompt": PROMPTS[1], "max_new_tokens": 4, "logprobs": 2}),
              json.dumps({"id": "noeos", "prompt": [3, 4], "max_new_tokens": 6,
                          "ignore_eos": True, "min_tokens": 2})]
    return lines


def check_replies(replies, expected, check):
    """Every reply of request_lines()'s run, checked."""
    by_id = {}
    for r in replies:
        by_id.setdefault(json.dumps(r["id"]), []).append(r)
    check(len(replies) == len(PROMPTS) + len(BAD) + 8, f"{len(replies)} reply lines, one per line "
          "that is a request (cancellations get none)")
    for i, p in enumerate(PROMPTS):
        r = by_id.get(str(i), [{}])[0]
        check(r.get("tokens") == expected[i] and r.get("finish") == "length",
              f"request {i}: tokens equal statickv-demo's: {r.get('tokens')} vs {expected[i]}")
        check(r.get("ttft_s", -1) > 0 and r.get("queue_s", -1) >= 0
              and r.get("decode_tokens_per_s", 0) > 0, f"request {i}: timing fields present")
    for line, rid, texts in BAD:
        got = [r for r in replies if r.get("id") == rid and r.get("finish") == "error"
               and all(t in r.get("error", "") for t in texts)]
        check(len(got) == 1 and got[0]["tokens"] == [], f"refused {line!r}: error names {texts}")
        field = field_named(texts[0])
        if got and rid is not None and ":" in texts[0] and field != "request":
            check(got[0].get("field") == field,
                  f"refused {line!r}: field {got[0].get('field')!r} as data (want {field!r})")
    s = by_id.get('"stop"', [{}])[0]
    check(s.get("finish") == "stop" and s.get("tokens") == expected[0][:4],
          f"a stop token ends the request and is kept: {s.get('tokens')}")
    check(by_id.get('"later"', [{}])[0].get("finish") == "cancelled",
          "a request not yet due is cancelled")
    s1, s2 = by_id.get('"s1"', [{}])[0], by_id.get('"s2"', [{}])[0]
    check(s1.get("tokens") == s2.get("tokens") and len(s1.get("tokens", [])) == 8,
          "sampling with the same seed gives the same tokens")
    long = by_id.get('"long"', [{}])[0]
    check(long.get("finish") == "cancelled" and len(long.get("tokens", [0] * 250)) < 250,
          f"a waiting or running request is cancelled ({len(long.get('tokens', []))} tokens)")
    bias = by_id.get('"bias"', [{}])[0]
    check(bias.get("tokens") == [42] * 5, f"logit_bias +100 forces 42 over the penalties: {bias}")
    lp = by_id.get('"lp"', [{}])[0]
    entries = lp.get("logprobs") or []
    check(lp.get("tokens") == expected[1][:4] and [e["token"] for e in entries] == lp["tokens"]
          and all(len(e["top"]) == 2 and e["logprob"] <= 0 for e in entries)
          and all(e["top"][0][0] == e["token"] for e in entries),
          f"logprobs 2: each greedy token's log-probability, its top 2 led by the token: {lp}")
    noeos = by_id.get('"noeos"', [{}])[0]
    check(noeos.get("finish") == "length" and len(noeos.get("tokens", [])) == 6,
          "ignore_eos and min_tokens accepted; it runs to max_new_tokens")


def runner_mode():
    """The runner flag this run passes to statickv-serve (--eager or --buckets), if any."""
    return [flag for flag in ("--eager", "--buckets") if flag in sys.argv[3:]]


def check_speculation(exe, expected, check):
    """Speculation with a draft model on its own cache (rows mirroring the
    target's): greedy tokens unchanged. --draft-shape tiny with the same
    seed is the target itself, so every draft is accepted."""
    good = [json.dumps({"id": i, "prompt": p, "max_new_tokens": NEW})
            for i, p in enumerate(PROMPTS)]
    for shape, rate in (("tiny", "acceptance rate 100.0%"), ("tiny-mistral", "acceptance rate")):
        run = subprocess.run([exe, "--shape", "tiny", "--max-batch", "4", "--max-len", "256",
                              "--threads", "1", "--speculate", "3", "--draft-shape", shape,
                              *runner_mode()],
                             input="\n".join(good) + "\n", capture_output=True, text=True,
                             timeout=300)
        got = {r["id"]: r.get("tokens") for r in map(json.loads, run.stdout.splitlines())}
        check(run.returncode == 0 and all(got.get(i) == expected[i] for i in range(len(PROMPTS))),
              f"--draft-shape {shape} --speculate 3: tokens equal statickv-demo's")
        check(f"by draft model {shape} (random weights); {rate}" in run.stderr,
              f"--draft-shape {shape}: the acceptance rate is reported ({rate})")


def main():
    exe, demo = sys.argv[1], sys.argv[2]
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    expected = expected_tokens(demo)
    lines = request_lines(expected)
    replies = serve(exe, lines, runner_mode())
    check_replies(replies, expected, check)
    check_speculation(exe, expected, check)
    print(f"\n{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
