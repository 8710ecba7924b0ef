"""statickv-serve --http for the tools that score and load-test servers:
log-probabilities, echo, lists of prompts, n, the head's sampling fields, the
field policy and the tokenizer routes.

usage: check_http_scoring.py STATICKV_SERVE WORKDIR
       (a Python with torch, transformers, tokenizers, openai; HF_HUB_OFFLINE=1)

WORKDIR/tiny gets check_http.py's tiny random Llama and tokenizer. Every
server listens on 127.0.0.1:0 and is stopped with SIGTERM (exit status 0).
Requires, through the openai client and plain HTTP:

 1. completions' logprobs (N alternatives) and chat's logprobs/top_logprobs
    equal transformers' log_softmax of the model's logits at every generated
    token (1e-4, fp32), the top alternatives are the N most likely, and
    text_offset counts each token's bytes;
 2. echo with logprobs scores the prompt: the first token's entry is null,
    every later one is transformers' log-probability of that token, with
    max_tokens 1 (one generated token follows) and 0 (none; usage counts 0);
 3. a list of prompts (token-id lists or strings) answers one choice per
    prompt, in order, each what the prompt gives alone; n greedy choices are
    the single answer n times; seeded sampled choices differ from each other
    and repeat with the seed; streamed, the choices interleave and each
    index's pieces make its whole answer; usage counts every choice;
 4. the head's fields: logit_bias forces a token, repetition_penalty is
    transformers' generate(repetition_penalty=...), presence and frequency
    penalties follow OpenAI's rule, min_p and min_tokens are accepted, and
    ignore_eos runs to max_tokens;
 5. an unknown field is ignored (logged once, counted in /metrics), the
    bookkeeping fields and stream_options.continuous_usage_stats (usage in
    every chunk) are accepted; under --strict-fields an unknown field is a
    400 naming it;
 6. /tokenize, /detokenize and /tokenizer_info answer in vLLM's shapes with
    the tokenizer's ids and eos token, /v1/models carries root and
    max_model_len, and bad input on each gets its status and an error body
    naming the field while the server keeps serving.
"""

import json
import os
import sys
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_http import (COMMON, NAME, Checks, Server, call, client, error_of,  # noqa: E402
                        make_checkpoint, metrics, names, stream)

PROMPTS = [[5, 30, 61, 7, 12], [40, 2, 90, 13, 27, 8], [100, 3, 55]]
TOL = 1e-4


def log_softmax_rows(model, ids):
    """log_softmax of the model's logits at every position of ids: [len, vocab]."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, -1)


def close(a, b):
    return a is not None and abs(a - b) <= TOL


def token_text(tok, i):
    """A token's text as the server names it: special tokens included."""
    return tok.decode([i], skip_special_tokens=False)


# ---- 1. log-probabilities -------------------------------------------------------------------

def check_completion_logprobs(c, port, tok, model):
    prompt = PROMPTS[0]
    r = client(port).completions.create(model=NAME, prompt=prompt, max_tokens=5, temperature=0,
                                        logprobs=3)
    choice = r.choices[0]
    ids = choice.model_extra["token_ids"]
    lp = choice.logprobs
    rows = log_softmax_rows(model, prompt + ids)
    ok = len(lp.token_logprobs) == len(ids) == 5
    for t, i in enumerate(ids):
        row = rows[len(prompt) + t - 1]
        top = torch.topk(row, 3)
        ok = ok and close(lp.token_logprobs[t], row[i].item())
        ok = ok and len(lp.top_logprobs[t]) == 3
        ok = ok and close(max(lp.top_logprobs[t].values()), top.values[0].item())
        ok = ok and lp.tokens[t] == token_text(tok, i)
    offsets = [0]
    for piece in lp.tokens[:-1]:
        offsets.append(offsets[-1] + len(piece.encode()))
    c(ok and lp.text_offset == offsets,
      f"completions logprobs 3: each token's log-probability and top 3 are transformers' "
      f"(tokens {lp.tokens}, offsets {lp.text_offset})")


def check_chat_logprobs(c, port, tok, model):
    messages = [{"role": "user", "content": "hello world"}]
    r = client(port).chat.completions.create(model=NAME, messages=messages, max_tokens=4,
                                             temperature=0, logprobs=True, top_logprobs=2)
    choice = r.choices[0]
    ids, prompt = choice.model_extra["token_ids"], r.model_extra["prompt_token_ids"]
    content = choice.logprobs.content
    rows = log_softmax_rows(model, prompt + ids)
    ok = len(content) == len(ids) == 4
    for t, (entry, i) in enumerate(zip(content, ids)):
        row = rows[len(prompt) + t - 1]
        ok = ok and close(entry.logprob, row[i].item()) and entry.token == token_text(tok, i)
        ok = ok and bytes(entry.bytes) == entry.token.encode() and len(entry.top_logprobs) == 2
        ok = ok and close(entry.top_logprobs[0].logprob, row.max().item())
    c(ok, f"chat logprobs with top_logprobs 2: {len(content)} entries are transformers'")


def check_echo(c, port, tok, model):
    prompt = PROMPTS[1]
    rows = log_softmax_rows(model, prompt)
    want = [rows[t - 1][prompt[t]].item() for t in range(1, len(prompt))]
    for max_tokens in (1, 0):
        status, _, body = call(port, "POST", "/v1/completions",
                               {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                "logprobs": 1, "echo": True})
        r = json.loads(body) if status == 200 else {}
        choice = (r.get("choices") or [{}])[0]
        lp = choice.get("logprobs") or {}
        values = lp.get("token_logprobs") or []
        ok = status == 200 and len(values) == len(prompt) + max_tokens and values[0] is None
        ok = ok and lp["top_logprobs"][0] is None
        ok = ok and all(close(values[t], want[t - 1]) for t in range(1, len(prompt)))
        ok = ok and all(close(max(lp["top_logprobs"][t].values()),
                              rows[t - 1].max().item()) for t in range(1, len(prompt)))
        ok = ok and choice.get("text", "").startswith(tok.decode(prompt))
        ok = ok and r["usage"]["completion_tokens"] == max_tokens
        c(ok, f"echo with logprobs 1, max_tokens {max_tokens}: the prompt is scored as "
              f"transformers scores it ({status}, {len(values)} entries)")


# ---- 3. lists of prompts and n ----------------------------------------------------------------

def alone(port, prompt, **extra):
    r = client(port).completions.create(model=NAME, prompt=prompt, max_tokens=6, temperature=0,
                                        **extra)
    return r.choices[0].model_extra["token_ids"]


def check_lists(c, port, tok):
    singles = [alone(port, p) for p in PROMPTS]
    r = client(port).completions.create(model=NAME, prompt=PROMPTS, max_tokens=6, temperature=0)
    got = [(ch.index, ch.model_extra["token_ids"]) for ch in r.choices]
    c(got == list(enumerate(singles)) and r.usage.completion_tokens == 18
      and r.usage.prompt_tokens == sum(map(len, PROMPTS)),
      f"a list of 3 token-id prompts: one choice each, in order, as alone ({r.usage})")
    texts = [tok.decode(p) for p in PROMPTS[:2]]
    r = client(port).completions.create(model=NAME, prompt=texts, max_tokens=6, temperature=0)
    want = [alone(port, t) for t in texts]
    c([ch.model_extra["token_ids"] for ch in r.choices] == want,
      "a list of 2 string prompts: each choice as the string alone")


def check_n(c, port):
    single = alone(port, PROMPTS[0])
    r = client(port).completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=6,
                                        temperature=0, n=3)
    c([ch.model_extra["token_ids"] for ch in r.choices] == [single] * 3
      and [ch.index for ch in r.choices] == [0, 1, 2] and r.usage.completion_tokens == 18,
      "n 3 greedy: the single answer three times, indexes 0..2, usage counts all")
    sampled = dict(model=NAME, prompt=PROMPTS[0], max_tokens=8, temperature=1.0, n=3, seed=11)
    a = [ch.model_extra["token_ids"] for ch in client(port).completions.create(**sampled).choices]
    b = [ch.model_extra["token_ids"] for ch in client(port).completions.create(**sampled).choices]
    c(a == b and len({tuple(x) for x in a}) > 1,
      f"n 3 sampled with seed 11: reproducible, choices differ ({a})")
    status, _, body = call(port, "POST", "/v1/completions",
                           {"prompt": PROMPTS[0], "max_tokens": 2, "n": 9})
    c(status == 400 and names(error_of(body), "n"), f"n past --max-n 8: {status} {body[:120]!r}")


def check_stream_choices(c, port):
    body = {"prompt": PROMPTS[:2], "max_tokens": 6, "temperature": 0, "n": 2,
            "stream_options": {"include_usage": True}}
    whole = client(port).completions.create(model=NAME, prompt=PROMPTS[:2], max_tokens=6,
                                            temperature=0, n=2)
    status, _, chunks, done = stream(port, "/v1/completions", body)
    ids, order, finishes = {}, [], {}
    usage = [ch["usage"] for ch in chunks if not ch.get("choices")]
    for ch in chunks:
        for choice in ch.get("choices") or []:
            ids.setdefault(choice["index"], []).extend(choice.get("token_ids") or [])
            order.append(choice["index"])
            if choice.get("finish_reason"):
                finishes[choice["index"]] = choice["finish_reason"]
    want = {ch.index: ch.model_extra["token_ids"] for ch in whole.choices}
    interleaved = order != sorted(order)
    c(status == 200 and done and ids == want and len(finishes) == 4 and interleaved
      and usage and usage[-1]["completion_tokens"] == 24,
      f"stream of 2 prompts x n 2: choices interleave ({interleaved}), each index's pieces are "
      f"its whole answer, usage {usage[-1:] if usage else None}")


# ---- 4. the head's fields ---------------------------------------------------------------------

def greedy_with_penalties(model, prompt, n, presence, frequency):
    """OpenAI's rule on transformers' logits: logit - presence [count > 0] - frequency count."""
    ids, counts = list(prompt), {}
    for _ in range(n):
        with torch.no_grad():
            row = model(torch.tensor([ids])).logits[0, -1].float().clone()
        for t, k in counts.items():
            row[t] -= presence + frequency * k
        nxt = int(row.argmax())
        counts[nxt] = counts.get(nxt, 0) + 1
        ids.append(nxt)
    return ids[len(prompt):]


def check_head_fields(c, port, model):
    api = client(port)
    prompt = PROMPTS[2]
    r = api.completions.create(model=NAME, prompt=prompt, max_tokens=5, temperature=0,
                               logit_bias={"42": 100})
    c(r.choices[0].model_extra["token_ids"] == [42] * 5, "logit_bias +100 forces token 42")
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False,
                             repetition_penalty=1.5)
    want = out[0, len(prompt):].tolist()
    r = api.completions.create(model=NAME, prompt=prompt, max_tokens=8, temperature=0,
                               extra_body={"repetition_penalty": 1.5})
    c(r.choices[0].model_extra["token_ids"] == want,
      f"repetition_penalty 1.5 is transformers' generate's ({want})")
    want = greedy_with_penalties(model, prompt, 8, 0.8, 0.5)
    r = api.completions.create(model=NAME, prompt=prompt, max_tokens=8, temperature=0,
                               presence_penalty=0.8, frequency_penalty=0.5)
    c(r.choices[0].model_extra["token_ids"] == want,
      f"presence 0.8 and frequency 0.5 penalties follow OpenAI's rule ({want})")
    r = api.completions.create(model=NAME, prompt=prompt, max_tokens=7, temperature=0.9, seed=3,
                               extra_body={"min_p": 0.1, "min_tokens": 2, "ignore_eos": True})
    c(len(r.choices[0].model_extra["token_ids"]) == 7 and r.choices[0].finish_reason == "length",
      "min_p, min_tokens and ignore_eos accepted; ignore_eos runs to max_tokens")
    status, _, body = call(port, "POST", "/v1/completions",
                           {"prompt": prompt, "max_tokens": 2, "temperature": 0,
                            "logit_bias": {"x": 1}})
    c(status == 400 and names(error_of(body), "logit_bias"),
      f"logit_bias with a key that is no token id: {status} {body[:100]!r}")
    status, _, body = call(port, "POST", "/v1/completions",
                           {"prompt": prompt, "max_tokens": 2, "presence_penalty": "high"})
    c(status == 400 and names(error_of(body), "presence_penalty"),
      f"presence_penalty a string: {status}")


# ---- 5. the field policy ----------------------------------------------------------------------

def check_field_policy(c, port):
    before = metrics(port).get("statickv_ignored_fields_total", 0)
    body = {"prompt": PROMPTS[0], "max_tokens": 3, "temperature": 0, "tempreature": 0.5,
            "user": "u", "metadata": {"k": "v"}, "store": True, "service_tier": "auto"}
    status, _, resp = call(port, "POST", "/v1/completions", body)
    again, _, _ = call(port, "POST", "/v1/completions", body)
    after = metrics(port).get("statickv_ignored_fields_total", 0)
    c(status == 200 and again == 200 and after == before + 2,
      f"an unknown field is ignored and counted ({status}, {before} -> {after}); bookkeeping "
      f"fields accepted")
    status, _, chunks, done = stream(port, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    with_usage = [ch for ch in chunks if ch.get("choices")]
    c(status == 200 and done and with_usage and all("usage" in ch for ch in with_usage),
      f"continuous_usage_stats: usage in every chunk ({len(with_usage)} chunks)")


def check_strict(c, exe, tiny):
    server = Server(exe, ["--checkpoint", str(tiny), *COMMON, "--max-batch", "2",
                          "--served-model-name", NAME, "--strict-fields"])
    try:
        status, _, body = call(server.port, "POST", "/v1/completions",
                               {"prompt": [1, 2], "max_tokens": 2, "tempreature": 0.5})
        c(status == 400 and names(error_of(body), "tempreature"),
          f"--strict-fields: an unknown field is a 400 naming it ({status})")
    finally:
        rc = server.stop()
    c(rc == 0, f"the --strict-fields server exits 0 ({rc})")


# ---- 6. routes --------------------------------------------------------------------------------

def check_routes(c, port, tok, tiny):
    text = "hello world, hello rows<|im_end|>"
    status, _, body = call(port, "POST", "/tokenize", {"prompt": text, "add_special_tokens": False})
    got = json.loads(body) if status == 200 else {}
    want = tok.encode(text).ids
    c(got.get("tokens") == want and got.get("count") == len(want)
      and got.get("max_model_len") == 128, f"/tokenize: {got}")
    status, _, body = call(port, "POST", "/detokenize", {"tokens": want})
    c(status == 200 and json.loads(body).get("prompt") == tok.decode(want),
      f"/detokenize: {body[:80]!r}")
    status, _, body = call(port, "GET", "/tokenizer_info")
    info = json.loads(body) if status == 200 else {}
    c(info.get("eos_token") == "<|im_end|>" and info.get("model_max_length") == 128,
      f"/tokenizer_info: {info}")
    status, _, body = call(port, "GET", "/v1/models")
    entry = (json.loads(body).get("data") or [{}])[0]
    c(entry.get("root") == str(tiny) and entry.get("max_model_len") == 128,
      f"/v1/models: root and max_model_len ({entry})")
    for what, path, req, field in [
            ("/tokenize with neither prompt nor messages", "/tokenize", {}, "prompt"),
            ("/tokenize with a number", "/tokenize", {"prompt": 5}, "prompt"),
            ("/detokenize with a string id", "/detokenize", {"tokens": [1, "x"]}, "tokens[1]"),
            ("/detokenize past the vocabulary", "/detokenize", {"tokens": [10 ** 6]}, "tokens")]:
        status, _, body = call(port, "POST", path, req)
        c(status == 400 and names(error_of(body), field), f"{what}: {status} {body[:100]!r}")
    status, _, _ = call(port, "GET", "/health")
    c(status == 200, "the server still serves after the bad requests")


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.split("\n\n")[1])
    exe, work = sys.argv[1], Path(sys.argv[2])
    start, c = time.monotonic(), Checks()
    tiny = work / "tiny"
    tok = make_checkpoint(tiny)
    AutoTokenizer.from_pretrained(str(tiny))  # the checkpoint loads in transformers
    model = AutoModelForCausalLM.from_pretrained(str(tiny), torch_dtype=torch.float32).eval()
    server = Server(exe, ["--checkpoint", str(tiny), *COMMON, "--max-batch", "8",
                          "--served-model-name", NAME])
    try:
        port = server.port
        c.run("completion logprobs", check_completion_logprobs, c, port, tok, model)
        c.run("chat logprobs", check_chat_logprobs, c, port, tok, model)
        c.run("echo", check_echo, c, port, tok, model)
        c.run("lists", check_lists, c, port, tok)
        c.run("n", check_n, c, port)
        c.run("streamed choices", check_stream_choices, c, port)
        c.run("head fields", check_head_fields, c, port, model)
        c.run("field policy", check_field_policy, c, port)
        c.run("routes", check_routes, c, port, tok, tiny)
    finally:
        rc = server.stop()
    c(rc == 0, f"SIGTERM: exit status {rc}")
    logged = [line for line in server.stderr if "tempreature" in line]
    c(len(logged) == 1, f"the unknown field is logged once: {logged}")
    c.run("strict", check_strict, c, exe, tiny)
    return c.exit_status(start)


if __name__ == "__main__":
    sys.exit(main())
