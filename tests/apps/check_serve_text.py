"""statickv-serve's "text" in and out, with a tokenizer: a tiny random Llama
checkpoint (transformers, vocab 320) next to a byte-level BPE tokenizer.json
trained here (Hugging Face tokenizers, offline), so the server finds the
tokenizer in the checkpoint directory.

usage: check_serve_text.py STATICKV_SERVE WORKDIR   (a Python with torch, transformers)

Requires: a "text" request gives the tokens a "prompt" request with the
tokenizer's ids of that text gives; every reply's "text" is the tokenizer's
decoding of its "tokens"; a "text" request on a server without a tokenizer
is refused naming the field.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

TEXTS = ["the cache keeps every row in place", "hello world, hello rows", "continuous batching"]


def save_tiny_llama(directory, vocab_size):
    """A tiny random LlamaForCausalLM (seed 0, no special token ids) saved into directory."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, max_position_embeddings=256, tie_word_embeddings=False,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    LlamaForCausalLM(config).eval().save_pretrained(directory)


def make_checkpoint(directory):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXTS * 20, trainer)
    save_tiny_llama(directory, tok.get_vocab_size())
    tok.save(str(Path(directory) / "tokenizer.json"))
    return tok


def serve(exe, lines, extra):
    run = subprocess.run([exe, "--max-batch", "2", "--max-len", "128", "--device", "cpu",
                          "--threads", "1", "--dtype", "fp32", *extra], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise SystemExit(f"statickv-serve exited {run.returncode}: {run.stderr}")
    return {json.dumps(r["id"]): r for r in map(json.loads, run.stdout.splitlines())}


def main():
    exe, work = sys.argv[1], Path(sys.argv[2])
    work.mkdir(parents=True, exist_ok=True)
    tok = make_checkpoint(work)
    lines = []
    for i, text in enumerate(TEXTS):
        lines.append(json.dumps({"id": f"t{i}", "text": text, "max_new_tokens": 6}))
        lines.append(json.dumps({"id": f"p{i}", "prompt": tok.encode(text).ids,
                                 "max_new_tokens": 6}))
    replies = serve(exe, lines, ["--checkpoint", str(work)])
    failures = 0
    for i, text in enumerate(TEXTS):
        t, p = replies.get(f'"t{i}"', {}), replies.get(f'"p{i}"', {})
        ok = (len(t.get("tokens", [])) == 6 and t.get("tokens") == p.get("tokens")
              and t.get("text") == tok.decode(t["tokens"]) and p.get("text") == t.get("text"))
        print(("ok   " if ok else "FAIL ") + f"{text!r}: {t} / {p}")
        failures += not ok
    bare = serve(exe, [json.dumps({"id": 1, "text": "hello", "max_new_tokens": 2})],
                 ["--shape", "tiny"])
    ok = "text: expected prompt" in bare.get("1", {}).get("error", "")
    print(("ok   " if ok else "FAIL ") + f"no tokenizer: {bare}")
    failures += not ok
    print(f"\n{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
