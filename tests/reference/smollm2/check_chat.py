#!/usr/bin/env python3
"""Text in, text out on a real checkpoint: statickv-demo against transformers
(ctests smollm2_chat and gemma3_text).

usage: check_chat.py --demo EXE --checkpoint DIR --prompts FILE [--new-tokens 32]
                     [--plain] [--caches static,hybrid] [--paths plain,fused]

For every prompt of FILE (one a line) transformers answers alone, unpadded:
AutoModelForCausalLM.generate(greedy, max_new_tokens) on
tokenizer.apply_chat_template(add_generation_prompt=True) or, with --plain,
on tokenizer(prompt) (a base model: Gemma 3 270M), fp32 on the CPU.
statickv-demo (--chat unless --plain) then answers the same prompts, for
each of --caches, once with all of them in one ragged batch on each decoder
path of --paths (Note [fused decode path]) and once each alone on the
default path (--alone N: only the N longest alone). Required, for every run
and prompt:

  - the generated ids (--print-ids) equal transformers' ids, eos included;
  - the answer text the demo streamed equals
    tokenizer.decode(ids, skip_special_tokens=True) of those ids;

and at least one answer holds non-ASCII text (so the streaming of characters
split across tokens is exercised). Exit status 0 when all hold, 1 otherwise,
with the first difference printed.
"""

import argparse
import os
import re
import subprocess
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402


def transformers_answers(checkpoint, prompts, new_tokens, plain):
    """Each prompt alone through transformers' greedy generate: new ids."""
    tok = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32,
                                                 use_kernels=False).eval()
    answers = []
    for prompt in prompts:
        if plain:
            ids = tok(prompt, return_tensors="pt")["input_ids"]
        else:
            ids = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                          add_generation_prompt=True, return_tensors="pt",
                                          return_dict=True)["input_ids"]
        with torch.inference_mode():
            out = model.generate(ids, max_new_tokens=new_tokens, do_sample=False)
        answers.append(out[0, ids.shape[1]:].tolist())
    return tok, answers


def run_demo(args, cache, prompts, path="auto"):
    """statickv-demo's streamed texts and generated ids for `prompts`."""
    cmd = [args.demo, "--checkpoint", args.checkpoint, "--device", "cpu", "--dtype", "fp32",
           "--cache", cache, "--path", path, "--max-new-tokens", str(args.new_tokens),
           "--no-compare", "--print-ids"] + ([] if args.plain else ["--chat"])
    for prompt in prompts:
        cmd += ["--prompt", prompt]
    run = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
    if run.returncode != 0:
        sys.exit(f"check_chat: {' '.join(cmd)} exited {run.returncode}:\n{run.stderr}")
    out = run.stdout
    ids = [[int(t) for t in line.split(",")] for line in out.strip().splitlines()[-len(prompts):]]
    texts = []
    for prompt in prompts:
        found = re.search("> " + re.escape(prompt) + r"\n(.*?)\n  \[\d+ tokens, ", out, re.DOTALL)
        if not found:
            sys.exit(f"check_chat: no streamed answer for {prompt!r} in:\n{out}")
        texts.append(found.group(1))
    return texts, ids


def compare(label, prompts, texts, ids, expected, tok):
    """Prints and counts the differences of one demo run."""
    failures = 0
    for prompt, text, got, want in zip(prompts, texts, ids, expected):
        if got != want:
            first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                         min(len(got), len(want)))
            print(f"FAIL {label} {prompt!r}: ids differ from transformers at token {first}:\n"
                  f"  statickv     {got}\n  transformers {want}")
            failures += 1
        decoded = tok.decode(got, skip_special_tokens=True)
        if text != decoded:
            print(f"FAIL {label} {prompt!r}: streamed text {text!r} != decode {decoded!r}")
            failures += 1
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--demo", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--plain", action="store_true",
                        help="prompts as text (tokenizer(prompt)), not chat turns")
    parser.add_argument("--caches", default="static,hybrid")
    parser.add_argument("--paths", default="plain,fused",
                        help="decoder paths of the batch runs (default plain,fused)")
    parser.add_argument("--alone", type=int, default=0,
                        help="run alone only the N longest prompts (default 0: every prompt)")
    args = parser.parse_args()
    with open(args.prompts, encoding="utf-8") as f:
        prompts = [line.rstrip("\n") for line in f if line.strip()]
    if len(prompts) < 4:
        sys.exit(f"check_chat: expected at least 4 prompts in {args.prompts}, got {len(prompts)}")
    tok, expected = transformers_answers(args.checkpoint, prompts, args.new_tokens, args.plain)
    answers = [tok.decode(ids, skip_special_tokens=True) for ids in expected]
    for prompt, answer in zip(prompts, answers):
        shown = prompt if len(prompt) < 120 else f"{prompt[:60]}...{prompt[-40:]}"
        print(f"transformers: {shown!r} ({len(tok(prompt).input_ids)} tokens) -> {answer!r}")
    failures = 0
    if not any(ord(c) > 127 for a in answers for c in a):
        print("FAIL: no answer holds non-ASCII text; choose a prompt whose answer does")
        failures += 1
    caches = args.caches.split(",")
    by_length = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    alone = sorted(by_length[:args.alone] if args.alone else by_length)
    paths = args.paths.split(",")
    for cache in caches:
        for path in paths:
            texts, ids = run_demo(args, cache, prompts, path)
            failures += compare(f"{cache} {path} batch of {len(prompts)}", prompts, texts, ids,
                                expected, tok)
        for i in alone:
            prompt = prompts[i]
            texts, ids = run_demo(args, cache, [prompt])
            failures += compare(f"{cache} alone", [prompt], texts, ids, [expected[i]], tok)
    runs = len(caches) * (len(paths) + len(alone))
    print(f"{runs} statickv-demo runs over {len(prompts)} prompts: "
          f"{'all equal transformers' if failures == 0 else f'{failures} failures'}")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
