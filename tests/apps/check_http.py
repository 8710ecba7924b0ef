"""statickv-serve --http as an OpenAI client sees it: the routes, streams,
errors, cancellation, load and shutdown of its OpenAI-compatible HTTP mode.

usage: check_http.py STATICKV_SERVE WORKDIR [--smollm2 DIR]
       (a Python with torch, transformers, tokenizers, openai; HF_HUB_OFFLINE=1)

WORKDIR/tiny gets a tiny random LlamaForCausalLM (hidden 64, 2 layers) with a
byte-level BPE tokenizer.json trained here on printable ASCII, offline, with
<|im_start|>/<|im_end|> as special tokens, and a tokenizer_config.json holding
SmolLM2's ChatML chat template. Every server is started with --http
127.0.0.1:0 (the port read from its "listening on" line) and stopped with
SIGTERM, which must end it with exit status 0. Requires:

 1. through the openai client, greedy: completions and chat, non-stream and
    stream, give the tokens statickv-serve's JSON-lines mode gives for the same
    prompt ids alone (--max-batch 1); the text is the tokenizer's decoding of
    the ids; streamed pieces and token_ids concatenated equal the non-stream
    ones; the first chat chunk is the assistant role; the last choice chunk
    has the finish_reason; include_usage adds a chunk with no choices and the
    counts; chat prompt_token_ids equal transformers' apply_chat_template of a
    multi-turn conversation (content parts too); /health, /v1/models;
 2. a stop string spanning a token boundary cuts the greedy text before its
    first occurrence (finish_reason stop), streamed or not, and token_ids end
    with the token completing the match;
 3. bad requests get their status (400 naming the field, 404, 405, 413, 401
    with --api-key) and a JSON error body, a body cut short neither hangs nor
    kills the server, and a stream running meanwhile is unharmed;
 4. a client that disconnects mid-stream frees its row (/metrics) and counts
    as cancelled;
 5. 64 concurrent streams (--max-queue 48) each complete with their tokens
    alone or get 503 with Retry-After; none is lost, and at least 48 complete
    (a 503 means 48 are waiting, and each of those completes); /metrics has
    every series of the contract and counts one request's tokens;
 6. SIGTERM mid-stream: the stream completes, then the process exits 0;
    --http with --tp 2 is refused (exit status 2, naming both);
 7. with --smollm2 DIR (a SmolLM2-135M-Instruct save_pretrained directory):
    a multi-turn chat's prompt ids equal transformers' apply_chat_template and
    its greedy tokens equal transformers' generate (fp32, 12 new tokens).
    Without --smollm2 that part is skipped, with a note;
 8. --gather-ms: four streams sent together to an idle server start in one
    step (the step count in /metrics), each with its tokens alone.
"""

import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import openai  # noqa: E402
import torch  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_serve_text import save_tiny_llama  # noqa: E402  (the same tiny Llama)

NAME = "tiny-http"
COMMON = ["--device", "cpu", "--dtype", "fp32", "--threads", "1", "--max-len", "128"]
# SmolLM2-135M-Instruct's chat template, as its tokenizer_config.json has it.
TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")
TEXTS = ["the cache keeps every row in place", "hello world, hello rows", "continuous batching",
         "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
         "system\nuser\nassistant\n", "What is the capital of France? Paris is.",
         "streams of tokens: 0123456789 (a-z) [A-Z] {json} <html> ~!@#$%^&*_+=|\\;:'\"`,./?"]
TEXT_PROMPT = "hello world, hello rows"
CHAT = [{"role": "system", "content": "You answer in one line."},
        {"role": "user", "content": "hello world"},
        {"role": "assistant", "content": "hello rows, in place"},
        {"role": "user", "content": "what is {{ 1 + 1 }} in the cache?"}]
STOP_PROMPTS = [[5, 30, 61, 7], [40, 2, 90, 13, 27], [100, 3], [8, 64, 3, 19]]
CONCURRENT = [11, 4, 57, 21]  # streams while bad requests come in (100 tokens)
DRAIN = [9, 14, 2, 77]  # streams while SIGTERM comes in (100 tokens)
LOAD = 64


class Checks:
    def __init__(self):
        self.failures = []

    def __call__(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            self.failures.append(what)
        return ok

    def run(self, name, fn, *args):
        """fn(*args), an exception in it one failure (the next section still runs)."""
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - every failure is reported, none ends the run
            self(False, f"{name}: {type(e).__name__}: {e}")
            return None

    def stopped(self, server):
        """SIGTERM to `server`: its exit status must be 0."""
        rc = server.stop()
        self(rc == 0, f"SIGTERM: exit status {rc}")

    def exit_status(self, start):
        """Prints the failure count and the seconds since `start`: the script's exit status."""
        print(f"\n{len(self.failures)} failures ({time.monotonic() - start:.0f} s)")
        return 1 if self.failures else 0


# ---- the checkpoint and the transformers side ----------------------------------------------

def make_checkpoint(directory):
    """A tiny random Llama with its tokenizer and chat template: the tokenizers Tokenizer."""
    directory.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    ascii_text = "".join(chr(c) for c in range(32, 127)) + "\n"
    alphabet = sorted({c for piece, _ in tok.pre_tokenizer.pre_tokenize_str(ascii_text)
                       for c in piece})
    trainer = trainers.BpeTrainer(vocab_size=320, initial_alphabet=alphabet, show_progress=False,
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.train_from_iterator(TEXTS * 20, trainer)
    save_tiny_llama(directory, tok.get_vocab_size())
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": TEMPLATE,
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
        "pad_token": "<|im_end|>", "model_max_length": 128}))
    return tok


def chat_ids(hf_tok, messages):
    """transformers' apply_chat_template(add_generation_prompt=True) ids."""
    out = hf_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                     return_dict=True)
    return list(out["input_ids"])


def decode(tok, ids):
    return tok.decode(ids, skip_special_tokens=True)


def reference_prompts(tok, hf_tok):
    """name -> (prompt ids, max new tokens) for the JSON-lines run."""
    ref = {"text": (tok.encode(TEXT_PROMPT).ids, 16), "chat": (chat_ids(hf_tok, CHAT), 12),
           "concurrent": (CONCURRENT, 100), "drain": (DRAIN, 100)}
    for i, p in enumerate(STOP_PROMPTS):
        ref[f"stop{i}"] = (p, 24)
    rng, seen = random.Random(7), set()
    while len(seen) < LOAD:
        seen.add(tuple(rng.randrange(3, tok.get_vocab_size()) for _ in range(rng.randint(4, 12))))
    for i, p in enumerate(sorted(seen)):
        ref[f"load{i}"] = (list(p), 8 + i % 9)
    return ref


def json_lines(exe, checkpoint, ref):
    """Each prompt of ref alone (--max-batch 1) in JSON-lines mode: name -> tokens."""
    lines = [json.dumps({"id": k, "prompt": p, "max_new_tokens": n}) for k, (p, n) in ref.items()]
    run = subprocess.run([exe, "--checkpoint", str(checkpoint), *COMMON, "--max-batch", "1"],
                         input="\n".join(lines) + "\n", capture_output=True, text=True,
                         timeout=300)
    if run.returncode != 0:
        raise SystemExit(f"statickv-serve (JSON lines) exited {run.returncode}: {run.stderr}")
    replies = {r["id"]: r for r in map(json.loads, run.stdout.splitlines())}
    bad = [k for k, (_, n) in ref.items()
           if replies.get(k, {}).get("finish") != "length" or len(replies[k]["tokens"]) != n]
    if bad:
        raise SystemExit(f"JSON-lines replies missing or short: {bad[:5]} {run.stderr}")
    return {k: replies[k]["tokens"] for k in ref}


# ---- a server process ----------------------------------------------------------------------

class Server:
    """statickv-serve --http 127.0.0.1:0 with `flags`; .port once it listens."""

    LISTENING = re.compile(r"statickv-serve: listening on http://127\.0\.0\.1:(\d+)\s*$")

    def __init__(self, exe, flags, startup_s=120):
        self.stderr, self.port = [], None
        self.proc = subprocess.Popen([exe, *flags, "--http", "127.0.0.1:0"],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        ready = threading.Event()
        threading.Thread(target=self._read_stderr, args=(ready,), daemon=True).start()
        deadline = time.monotonic() + startup_s
        while not ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"statickv-serve did not listen (exit {self.proc.poll()}): "
                                   + "".join(self.stderr[-20:]))

    def _read_stderr(self, ready):
        for line in self.proc.stderr:
            self.stderr.append(line)
            m = self.LISTENING.match(line)
            if m and self.port is None:
                self.port = int(m.group(1))
                ready.set()

    def stop(self, timeout_s=60):
        """SIGTERM, then its exit status (None: still running after timeout_s, killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
        self.kill()
        return rc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.proc.stdin.close()


# ---- HTTP ----------------------------------------------------------------------------------

def call(port, method, path, body=None, headers=None, timeout=30):
    """One request on its own connection: (status, lower-cased headers, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        hdrs = dict(headers or {})
        if data is not None:
            hdrs.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def stream(port, path, body, headers=None, timeout=120, on_event=None):
    """POST with "stream": true: (status, headers, chunks, done), chunks the parsed
    data events and done whether data: [DONE] ended them (the body when status != 200)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, body=json.dumps({**body, "stream": True}).encode(),
                     headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        if resp.status != 200:
            return resp.status, hdrs, resp.read(), False
        chunks, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = resp.readline()
            if not line:
                return 200, hdrs, chunks, False
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return 200, hdrs, chunks, True
            chunks.append(json.loads(data))
            if on_event:
                on_event(len(chunks))
        raise TimeoutError(f"stream not done in {timeout} s")
    finally:
        conn.close()


def summary(chunks):
    """Completion or chat chunks (dicts): (text, token_ids, finish_reasons, usage chunks)."""
    text, ids, finish, usage = "", [], [], []
    for c in chunks:
        if not c.get("choices"):
            usage.append(c)
            continue
        choice = c["choices"][0]
        text += choice.get("text") or (choice.get("delta") or {}).get("content") or ""
        ids += choice.get("token_ids") or []
        if choice.get("finish_reason"):
            finish.append(choice["finish_reason"])
    return text, ids, finish, usage


def error_of(body):
    """The "error" object of an error body, or None when it is not one."""
    try:
        err = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    return err if isinstance(err, dict) and isinstance(err.get("message"), str) else None


def names(err, field):
    """The error names `field`: its param, or the message as "field: ..." or 'field'."""
    msg = (err or {}).get("message", "")
    return bool(err) and (err.get("param") == field or msg.startswith(field + ":")
                          or f"'{field}'" in msg or f"\"{field}\"" in msg
                          or f"`{field}`" in msg)


def metrics(port):
    """/metrics as {"name{labels}": value}, spaces inside labels removed."""
    status, _, body = call(port, "GET", "/metrics")
    assert status == 200, f"/metrics: status {status}"
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[re.sub(r"\s+", "", key)] = float(value)
    return out


def wait_metrics(port, want, timeout_s=20):
    """Polls /metrics until want(m) holds: (held, last metrics)."""
    deadline = time.monotonic() + timeout_s
    while True:
        m = metrics(port)
        if want(m) or time.monotonic() > deadline:
            return want(m), m
        time.sleep(0.2)


def client(port, key="sk-none"):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0,
                         timeout=60)


# ---- 1. the openai client, greedy ----------------------------------------------------------

def check_routes(c, port):
    status, _, body = call(port, "GET", "/health")
    c(status == 200 and json.loads(body) == {"status": "ok"}, f"/health: {status} {body[:80]}")
    models_list = client(port).models.list()
    ids = [m.id for m in models_list.data]
    c(ids == [NAME] and models_list.data[0].owned_by == "statickv",
      f"/v1/models lists the served name {NAME}: {ids}")


def check_completions(c, port, tok, ref, alone):
    api, (prompt, n) = client(port), ref["text"]
    r = api.completions.create(model=NAME, prompt=TEXT_PROMPT, max_tokens=n, temperature=0)
    got, extra = r.choices[0], r.model_extra or {}
    ids = (got.model_extra or {}).get("token_ids")
    c(extra.get("prompt_token_ids") == prompt and ids == alone["text"]
      and got.finish_reason == "length",
      f"completion of {TEXT_PROMPT!r}: prompt ids as the tokenizer's, tokens as JSON lines: {ids}")
    c(got.text == decode(tok, alone["text"]) and r.object == "text_completion"
      and r.id.startswith("cmpl-") and r.model == NAME,
      f"completion: text is the tokenizer's decoding of its ids: {got.text!r}")
    u = r.usage
    c(u is not None and (u.prompt_tokens, u.completion_tokens, u.total_tokens)
      == (len(prompt), n, len(prompt) + n), f"completion usage: {u}")
    by_ids = api.completions.create(model=NAME, prompt=prompt, max_tokens=n, temperature=0)
    c((by_ids.choices[0].model_extra or {}).get("token_ids") == alone["text"],
      "completion of the same prompt as token ids: the same tokens")
    chunks = [x.model_dump() for x in api.completions.create(
        model=NAME, prompt=TEXT_PROMPT, max_tokens=n, temperature=0, stream=True,
        stream_options={"include_usage": True})]
    text, sids, finish, usage = summary(chunks)
    c(text == got.text and sids == alone["text"],
      f"stream: {len(chunks)} chunks; pieces and token_ids concatenated equal the non-stream ones")
    last = [x for x in chunks if x.get("choices")][-1]["choices"][0]
    c(finish == ["length"] and last.get("finish_reason") == "length",
      f"stream: only the last choice chunk has the finish_reason: {finish}")
    c(len(usage) == 1 and chunks[-1] is usage[0] and usage[0]["choices"] == []
      and usage[0]["usage"]["completion_tokens"] == n
      and usage[0]["usage"]["prompt_tokens"] == len(prompt)
      and usage[0]["usage"]["total_tokens"] == len(prompt) + n,
      f"stream include_usage: one last chunk with choices [] and the counts: {usage}")


def check_chat(c, port, tok, hf_tok, ref, alone):
    api, (prompt, n) = client(port), ref["chat"]
    r = api.chat.completions.create(model=NAME, messages=CHAT, max_tokens=n, temperature=0)
    got, extra = r.choices[0], r.model_extra or {}
    ids = (got.model_extra or {}).get("token_ids")
    c(extra.get("prompt_token_ids") == prompt,
      f"chat (system, user, assistant, user): prompt ids equal transformers' "
      f"apply_chat_template: {len(prompt)} ids")
    c(ids == alone["chat"] and got.finish_reason == "length" and got.message.role == "assistant"
      and got.message.content == decode(tok, alone["chat"]) and r.object == "chat.completion"
      and r.id.startswith("chatcmpl-"), f"chat: tokens as JSON lines, text their decoding: {ids}")
    parts = [{**m, "content": [{"type": "text", "text": m["content"][:5]},
                               {"type": "text", "text": m["content"][5:]}]} for m in CHAT]
    p = api.chat.completions.create(model=NAME, messages=parts, max_tokens=2, temperature=0)
    c((p.model_extra or {}).get("prompt_token_ids") == prompt,
      "chat with content as text parts: the same prompt ids")
    one = [{"role": "user", "content": "hello world"}]
    o = api.chat.completions.create(model=NAME, messages=one, max_tokens=2, temperature=0)
    c((o.model_extra or {}).get("prompt_token_ids") == chat_ids(hf_tok, one),
      "chat with one user message: the template's default system message, as transformers'")
    chunks = [x.model_dump() for x in api.chat.completions.create(
        model=NAME, messages=CHAT, max_completion_tokens=n, temperature=0, stream=True,
        stream_options={"include_usage": True})]
    text, sids, finish, usage = summary(chunks)
    first = chunks[0]["choices"][0]["delta"] if chunks and chunks[0].get("choices") else {}
    c(first.get("role") == "assistant" and not first.get("content")
      and chunks[0]["object"] == "chat.completion.chunk",
      f"chat stream: the first chunk's delta is the assistant role: {first}")
    c(text == got.message.content and sids == ids and finish == ["length"],
      f"chat stream: pieces and token_ids concatenated equal the non-stream ones, {finish}")
    c(len(usage) == 1 and chunks[-1]["choices"] == []
      and usage[0]["usage"]["prompt_tokens"] == len(prompt)
      and usage[0]["usage"]["completion_tokens"] == n, f"chat stream usage chunk: {usage}")


# ---- 2. stop strings -----------------------------------------------------------------------

def pick_stop(tok, ids):
    """A 4-character stop string across the boundary of two tokens past the middle of ids,
    first found there (not earlier in the text)."""
    text = decode(tok, ids)
    for k in range(len(ids) // 2, len(ids) - 1):
        at = len(decode(tok, ids[:k]))
        stop = text[at - 2:at + 2]
        if at >= 3 and at + 2 <= len(text) and stop.strip() and text.find(stop) == at - 2:
            return stop
    return None


def check_stop_strings(c, port, tok, ref, alone):
    api = client(port)
    key = next((k for k in ref if k.startswith("stop") and pick_stop(tok, alone[k])), None)
    if not c(key is not None, "a greedy completion has a stop string across a token boundary"):
        return
    prompt, n = ref[key]
    text, stop = decode(tok, alone[key]), pick_stop(tok, alone[key])
    want_text = text[:text.index(stop)]
    m = next(m for m in range(1, n + 1) if stop in decode(tok, alone[key][:m]))
    r = api.completions.create(model=NAME, prompt=prompt, max_tokens=n, temperature=0,
                               stop=[stop, "@@never@@"])
    got = r.choices[0]
    c(got.text == want_text and got.finish_reason == "stop",
      f"stop {stop!r} on greedy {text!r}: text {got.text!r}, finish {got.finish_reason}")
    c((got.model_extra or {}).get("token_ids") == alone[key][:m],
      f"stop {stop!r}: token_ids end with the token completing the match ({m} of {n})")
    chunks = [x.model_dump() for x in api.completions.create(
        model=NAME, prompt=prompt, max_tokens=n, temperature=0, stop=stop, stream=True)]
    stext, sids, finish, _ = summary(chunks)
    c(stext == want_text and stop not in stext and finish == ["stop"] and sids == alone[key][:m],
      f"stop {stop!r} streamed: pieces {stext!r}, finish {finish}")
    chat = api.chat.completions.create(model=NAME, messages=CHAT, max_tokens=ref["chat"][1],
                                       temperature=0, stop=stop)
    ctext = decode(tok, alone["chat"])
    want = ctext[:ctext.index(stop)] if stop in ctext else ctext
    c(chat.choices[0].message.content == want,
      f"chat with stop {stop!r}: {chat.choices[0].message.content!r}")


# ---- 3. bad requests -----------------------------------------------------------------------

BAD = [  # (what, method, path, body, status, field the error names or None)
    ("malformed JSON", "POST", "/v1/completions", b'{"prompt": [1, 2', 400, None),
    ("max_tokens a string", "POST", "/v1/completions",
     {"prompt": [1, 2], "max_tokens": "x"}, 400, "max_tokens"),
    ("n 0", "POST", "/v1/completions", {"prompt": [1, 2], "max_tokens": 2, "n": 0}, 400, "n"),
    ("logprobs 21", "POST", "/v1/completions",
     {"prompt": [1, 2], "max_tokens": 2, "logprobs": 21}, 400, "logprobs"),
    ("a neutral field at another value", "POST", "/v1/completions",
     {"prompt": [1, 2], "max_tokens": 2, "best_of": 3}, 400, "best_of"),
    ("a prompt longer than --max-len", "POST", "/v1/completions",
     {"prompt": [5] * 200, "max_tokens": 1}, 400, None),
    # The Scheduler refuses it ("prompt[1]: ..."); its param is the field, carried as data.
    ("a token id past the vocabulary", "POST", "/v1/completions",
     {"prompt": [1, 100000], "max_tokens": 1}, 400, "prompt"),
    ("chat messages a string", "POST", "/v1/chat/completions",
     {"messages": "hi", "max_tokens": 2}, 400, "messages"),
    ("another model", "POST", "/v1/completions",
     {"model": "not-" + NAME, "prompt": [1], "max_tokens": 1}, 404, None),
    ("an unknown route", "GET", "/v1/nowhere", None, 404, None),
    ("GET on /v1/completions", "GET", "/v1/completions", None, 405, None),
    ("a body over --max-body-bytes 4096", "POST", "/v1/completions",
     {"prompt": [1], "max_tokens": 1, "user": "x" * 8192}, 413, None),
]


def check_bad_requests(c, port, ref, alone):
    result, started = {}, threading.Event()
    body = {"model": NAME, "prompt": ref["concurrent"][0], "max_tokens": ref["concurrent"][1],
            "temperature": 0}
    t = threading.Thread(target=lambda: result.update(r=stream(
        port, "/v1/completions", body, on_event=lambda _: started.set())), daemon=True)
    t.start()
    started.wait(30)  # its first chunk is out: the bad requests come while it runs
    for what, method, path, req, want, field in BAD:
        try:
            status, _, resp = call(port, method, path, req)
        except (ConnectionError, OSError) as e:
            c(False, f"{what}: {want} expected, connection failed: {e}")
            continue
        err = error_of(resp)
        c(status == want and err is not None and (field is None or names(err, field)),
          f"{what}: {status} (want {want}{', naming ' + field if field else ''}): {resp[:160]!r}")
    neutral = {"prompt": ref["text"][0], "max_tokens": 3, "temperature": 0, "n": 1, "best_of": 1,
               "echo": False, "logprobs": None, "presence_penalty": 0, "frequency_penalty": 0,
               "logit_bias": {}, "user": "u", "suffix": None, "top_p": 1}
    status, _, resp = call(port, "POST", "/v1/completions", neutral)
    ok = status == 200 and json.loads(resp)["choices"][0].get("token_ids") == alone["text"][:3]
    c(ok, f"neutral values (n 1, echo false, logit_bias {{}}, ...) accepted: {status}")
    running = t.is_alive()
    t.join(120)
    status, hdrs, chunks, done = result.get("r", (None, {}, [], False))
    _, ids, finish, _ = summary(chunks if status == 200 else [])
    c(status == 200 and done and ids == alone["concurrent"] and finish == ["length"]
      and hdrs.get("content-type", "").startswith("text/event-stream"),
      f"the stream running meanwhile: {len(ids)} tokens as alone, [DONE] {done} (still "
      f"running after the bad requests: {running})")


def check_cut_short(c, port):
    """Bodies shorter than their Content-Length: a 4xx or a close, then /health."""
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n")
    for how in ("write side shut", "socket closed"):
        sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        reply = b""
        try:
            sock.sendall(head + b'{"prompt": [1, 2], "max_tok')
            if how == "socket closed":
                sock.close()
            else:
                sock.shutdown(socket.SHUT_WR)
                while len(reply) < 65536:
                    data = sock.recv(4096)
                    if not data:
                        break
                    reply += data
        except (ConnectionResetError, BrokenPipeError):
            pass
        except socket.timeout:
            reply = b"(no reply and no close in 15 s)"
        finally:
            sock.close()
        status = reply.split(b" ")[1][:3] if reply.startswith(b"HTTP/1.") else b""
        ok = reply == b"" or status.startswith(b"4")
        alive = call(port, "GET", "/health")[0] == 200
        c(ok and alive, f"a body cut short, {how}: reply {reply[:40]!r}; /health after: {alive}")


# ---- 4. disconnect, 5. load, metrics --------------------------------------------------------

def check_disconnect(c, port):
    cancelled = 'statickv_requests_total{outcome="cancelled"}'
    before = metrics(port).get(cancelled, 0)
    body = json.dumps({"model": NAME, "prompt": [3, 9, 27], "max_tokens": 120, "temperature": 0,
                       "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    got, deadline = b"", time.monotonic() + 30
    try:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        while got.count(b"data:") < 2 and time.monotonic() < deadline:
            data = sock.recv(4096)
            if not data:
                break
            got += data
    finally:
        sock.close()
    c(got.count(b"data:") >= 2, f"disconnect: 2 chunks read before closing ({len(got)} bytes)")
    held, m = wait_metrics(port, lambda m: m.get("statickv_rows_in_use") == 0
                           and m.get(cancelled, 0) == before + 1)
    c(held, f"disconnect: within 20 s rows_in_use {m.get('statickv_rows_in_use')} (want 0), "
      f"cancelled {before} -> {m.get(cancelled, 0)} (want +1)")


def load_client(port, ids, n, barrier, out, key):
    try:
        barrier.wait(30)
        out[key] = stream(port, "/v1/completions",
                          {"prompt": ids, "max_tokens": n, "temperature": 0}, timeout=200)
    except Exception as e:  # noqa: BLE001 - counted as lost below
        out[key] = ("error", {}, f"{type(e).__name__}: {e}", False)


def check_load(c, port, ref, alone):
    keys = [k for k in ref if k.startswith("load")]
    out, barrier, start = {}, threading.Barrier(len(keys)), time.monotonic()
    threads = [threading.Thread(target=load_client, args=(port, *ref[k], barrier, out, k),
                                daemon=True) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, 240 - (time.monotonic() - start)))
    done, refused, wrong = [], [], []
    for k in keys:
        status, hdrs, chunks, finished = out.get(k, ("lost", {}, None, False))
        if status == 200 and finished and summary(chunks)[1:3] == (alone[k], ["length"]):
            done.append(k)
        elif status == 503 and hdrs.get("retry-after") and error_of(chunks):
            refused.append(k)
        else:
            wrong.append(f"{k}: {status} {str(chunks)[:120]}")
    c(not wrong and len(done) >= LOAD - 16,
      f"load: {LOAD} concurrent streams in {time.monotonic() - start:.1f} s: {len(done)} "
      f"completed with their tokens alone, {len(refused)} refused 503 with Retry-After, "
      f"{len(wrong)} wrong or lost {wrong[:3]}")
    held, m = wait_metrics(port, lambda m: m.get("statickv_rows_in_use") == 0
                           and m.get("statickv_queue_depth") == 0)
    c(held, f"load: afterwards rows_in_use {m.get('statickv_rows_in_use')} and queue_depth "
      f"{m.get('statickv_queue_depth')} are 0")


def check_metrics(c, port, ref):
    m = metrics(port)
    families = ["statickv_requests_total", "statickv_http_responses_total",
                "statickv_prompt_tokens_total", "statickv_generation_tokens_total",
                "statickv_queue_depth", "statickv_rows_in_use", "statickv_rows_total"]
    for h in ("time_to_first_token_seconds", "time_per_output_token_seconds", "step_seconds",
              "http_token_write_seconds"):
        families += [f"statickv_{h}_bucket", f"statickv_{h}_sum", f"statickv_{h}_count"]
    missing = [f for f in families if not any(k.split("{")[0] == f for k in m)]
    c(not missing and m.get("statickv_rows_total") == 8, f"/metrics has every name, rows_total "
      f"{m.get('statickv_rows_total')} (--max-batch 8); missing {missing}")
    steps, took = m.get("statickv_step_seconds_count", 0), m.get("statickv_step_seconds_sum", 0)
    c(steps > 0 and took > 0, f"/metrics times the engine's steps: {steps} steps, {took} s")
    statuses = [s for s in ("200", "400", "404", "405", "413")
                if m.get(f'statickv_http_responses_total{{status="{s}"}}', 0) < 1]
    c(not statuses, f"/metrics counts responses by status; none seen for {statuses}")
    prompt, n = [2, 6, 2, 6, 2], 5  # a start no other prompt has (no prefix-cache hit)
    call(port, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0})
    after = metrics(port)
    dp = after.get("statickv_prompt_tokens_total", 0) - m.get("statickv_prompt_tokens_total", 0)
    dg = (after.get("statickv_generation_tokens_total", 0)
          - m.get("statickv_generation_tokens_total", 0))
    dl = (after.get('statickv_requests_total{outcome="length"}', 0)
          - m.get('statickv_requests_total{outcome="length"}', 0))
    c((dp, dg, dl) == (len(prompt), n, 1), f"one request of {len(prompt)} prompt and {n} new "
      f"tokens adds (prompt, generation, length outcomes) = {(dp, dg, dl)}")


# ---- the api key, 6. SIGTERM ----------------------------------------------------------------

def check_api_key(c, port):
    for what, headers, want in (("no key", {}, 401), ("a wrong key", {"Authorization":
                                "Bearer sk-wrong"}, 401), ("the key", {"Authorization":
                                "Bearer sk-test"}, 200)):
        status, _, body = call(port, "GET", "/v1/models", headers=headers)
        c(status == want and (want == 200 or error_of(body) is not None),
          f"--api-key: GET /v1/models with {what}: {status} (want {want})")
    status, _, body = call(port, "POST", "/v1/completions", {"prompt": [1], "max_tokens": 1})
    c(status == 401 and error_of(body) is not None, f"--api-key: POST without a key: {status}")
    c(call(port, "GET", "/health")[0] == 200 and call(port, "GET", "/metrics")[0] == 200,
      "--api-key: /health and /metrics need no key")
    try:
        client(port, "sk-wrong").models.list()
        c(False, "--api-key: the openai client with a wrong key is refused")
    except openai.AuthenticationError:
        c(True, "--api-key: the openai client with a wrong key gets AuthenticationError")


def check_drain(c, server, ref, alone):
    prompt, n = ref["drain"]
    sent = []

    def on_event(count):
        if count == 2 and not sent:
            server.proc.send_signal(signal.SIGTERM)
            sent.append(time.monotonic())

    status, _, chunks, done = stream(server.port, "/v1/completions",
                                     {"prompt": prompt, "max_tokens": n, "temperature": 0},
                                     headers={"Authorization": "Bearer sk-test"},
                                     on_event=on_event)
    _, ids, finish, _ = summary(chunks if status == 200 else [])
    c(bool(sent) and status == 200 and done and ids == alone["drain"] and finish == ["length"],
      f"SIGTERM after 2 chunks: the stream completes ({len(ids)} of {n} tokens, [DONE] {done}, "
      f"{finish})")
    try:
        rc = server.proc.wait(60)
    except subprocess.TimeoutExpired:
        rc = "still running after 60 s"
    c(rc == 0, f"SIGTERM with a stream in flight: exit status {rc}")


# ---- 7. SmolLM2 -----------------------------------------------------------------------------

SMOL_CHAT = [{"role": "system", "content": "You are a concise assistant."},
             {"role": "user", "content": "What is the capital of France?"},
             {"role": "assistant", "content": "Paris."},
             {"role": "user", "content": "And of Italy? Answer in one word, s'il vous plaît."}]


def smollm2_transformers(directory, new_tokens):
    from transformers import AutoModelForCausalLM
    hf_tok = AutoTokenizer.from_pretrained(directory)
    prompt = chat_ids(hf_tok, SMOL_CHAT)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                 use_kernels=False).eval()
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt),
                             dtype=torch.long), max_new_tokens=new_tokens, do_sample=False)
    eos = model.generation_config.eos_token_id
    del model
    return hf_tok, prompt, out[0, len(prompt):].tolist(), eos if isinstance(eos, list) else [eos]


def check_smollm2(c, exe, directory):
    n = 12
    hf_tok, prompt, want, eos = smollm2_transformers(directory, n)
    server = Server(exe, ["--checkpoint", directory, *COMMON, "--max-batch", "8"])
    try:
        api, name = client(server.port), Path(directory).name
        c([m.id for m in api.models.list().data] == [name],
          f"SmolLM2: the served name defaults to the directory's basename {name!r}")
        r = api.chat.completions.create(model=name, messages=SMOL_CHAT, max_tokens=n,
                                        temperature=0)
        got, extra = r.choices[0], r.model_extra or {}
        ids = (got.model_extra or {}).get("token_ids")
        c(extra.get("prompt_token_ids") == prompt, f"SmolLM2 chat: prompt ids equal transformers' "
          f"apply_chat_template ({len(prompt)} ids)")
        finish = "stop" if want and want[-1] in eos and len(want) < n else "length"
        c(ids == want and got.finish_reason == finish, f"SmolLM2 chat: greedy tokens equal "
          f"transformers' generate: {ids} vs {want}, finish {got.finish_reason}")
        c(got.message.content == hf_tok.decode(want, skip_special_tokens=True),
          f"SmolLM2 chat: text {got.message.content!r} is transformers' decoding")
        chunks = [x.model_dump() for x in api.chat.completions.create(
            model=name, messages=SMOL_CHAT, max_tokens=n, temperature=0, stream=True)]
        text, sids, _, _ = summary(chunks)
        c(text == got.message.content and sids == ids, "SmolLM2 chat stream: the same text, ids")
    finally:
        rc = server.stop()
    c(rc == 0, f"SmolLM2 server: SIGTERM, exit status {rc}")


# ---- main -----------------------------------------------------------------------------------

def serve_tiny(c, exe, tiny, tok, hf_tok, ref, alone):
    server = Server(exe, ["--checkpoint", str(tiny), *COMMON, "--max-batch", "8",
                          "--served-model-name", NAME, "--max-queue", "48", "--http-threads", "80",
                          "--max-body-bytes", "4096"])
    try:
        port = server.port
        c.run("routes", check_routes, c, port)
        c.run("completions", check_completions, c, port, tok, ref, alone)
        c.run("chat", check_chat, c, port, tok, hf_tok, ref, alone)
        c.run("stop strings", check_stop_strings, c, port, tok, ref, alone)
        c.run("bad requests", check_bad_requests, c, port, ref, alone)
        c.run("cut short", check_cut_short, c, port)
        c.run("disconnect", check_disconnect, c, port)
        c.run("load", check_load, c, port, ref, alone)
        c.run("metrics", check_metrics, c, port, ref)
    finally:
        rc = server.stop()
    c(rc == 0, f"SIGTERM on an idle server: exit status {rc}")


def check_tp_refused(c, exe):
    run = subprocess.run([exe, "--shape", "tiny", *COMMON, "--http", "127.0.0.1:0", "--tp", "2"],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    c(run.returncode == 2 and "--http" in run.stderr and "--tp" in run.stderr,
      f"--http with --tp 2 is refused: exit {run.returncode}, {run.stderr.strip()[-160:]!r}")


def check_bad_generation_config(c, exe, tiny, work):
    """A generation_config.json field of the wrong type stops the server at
    start, naming the file and the field (a silent default would answer
    differently from transformers' generate)."""
    bad = work / "bad_generation_config"
    shutil.copytree(tiny, bad, dirs_exist_ok=True)
    (bad / "generation_config.json").write_text(json.dumps({"do_sample": True,
                                                            "temperature": "warm"}))
    run = subprocess.run([exe, "--checkpoint", str(bad), *COMMON, "--http", "127.0.0.1:0"],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    err = run.stderr.strip()[-240:]
    c(run.returncode != 0 and "generation_config.json: temperature: expected a finite number but got "
      '"warm"' in run.stderr, f"a string temperature is refused at start: exit {run.returncode}, "
      f"{err!r}")


def check_gather(c, port, ref, alone):
    """Four streams of 8 tokens sent together to an idle server start in one
    step: all four end at step 8 (a stream joining a step late ends later)."""
    keys, n = ["load0", "load1", "load2", "load3"], 8
    out, barrier = {}, threading.Barrier(len(keys))
    threads = [threading.Thread(target=load_client, args=(port, ref[k][0], n, barrier, out, k),
                                daemon=True) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    same = [k for k in keys if out.get(k, ("lost",))[0] == 200
            and summary(out[k][2])[1] == alone[k][:n]]
    steps = metrics(port).get("statickv_step_seconds_count", 0)
    c(len(same) == len(keys) and steps == n,
      f"--gather-ms: {len(keys)} streams of {n} tokens sent together to an idle server start in "
      f"one step: {steps} steps; {len(same)} equal alone")


def serve_gathered(c, exe, tiny, ref, alone):
    # A 5 s window: arrivals within 1 s of each other join the first step.
    server = Server(exe, ["--checkpoint", str(tiny), *COMMON, "--max-batch", "4",
                          "--gather-ms", "5000"])
    try:
        c.run("gather", check_gather, c, server.port, ref, alone)
    finally:
        server.stop()


def serve_with_key(c, exe, tiny, ref, alone):
    server = Server(exe, ["--checkpoint", str(tiny), *COMMON, "--max-batch", "8",
                          "--served-model-name", NAME, "--api-key", "sk-test"])
    try:
        c.run("api key", check_api_key, c, server.port)
        c.run("drain", check_drain, c, server, ref, alone)
    finally:
        server.stop()


def main():
    if len(sys.argv) not in (3, 5) or (len(sys.argv) == 5 and sys.argv[3] != "--smollm2"):
        raise SystemExit(__doc__.split("\n\n")[1])
    exe, work = sys.argv[1], Path(sys.argv[2])
    smollm2 = sys.argv[4] if len(sys.argv) == 5 else None
    start, c = time.monotonic(), Checks()
    tok = make_checkpoint(work / "tiny")
    hf_tok = AutoTokenizer.from_pretrained(str(work / "tiny"))
    ref = reference_prompts(tok, hf_tok)
    alone = json_lines(exe, work / "tiny", ref)
    serve_tiny(c, exe, work / "tiny", tok, hf_tok, ref, alone)
    serve_with_key(c, exe, work / "tiny", ref, alone)
    serve_gathered(c, exe, work / "tiny", ref, alone)
    c.run("--tp", check_tp_refused, c, exe)
    c.run("generation_config.json", check_bad_generation_config, c, exe, work / "tiny", work)
    if smollm2:
        c.run("SmolLM2", check_smollm2, c, exe, smollm2)
    else:
        print("note: no --smollm2 DIR: the SmolLM2-135M-Instruct chat (section 7) is skipped")
    return c.exit_status(start)


if __name__ == "__main__":
    sys.exit(main())
