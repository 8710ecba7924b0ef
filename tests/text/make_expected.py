#!/usr/bin/env python3
"""Writes what transformers' tokenizer does on a converted checkpoint (SmolLM2's
or Gemma 3's), for tests/text/test_tokenizer.cpp to compare
statickv::tokenizer with.

usage: make_expected.py CHECKPOINT_DIR OUT_JSON [TEXT_FILE ...]

CHECKPOINT_DIR is what tools/smollm2/convert.py or tools/gemma3/convert.py
wrote. OUT_JSON gets:
  vocab_size, eos_ids (generation_config.json's, then config.json's)
  texts: [{text, ids, prompt_ids, decoded, decoded_skip}]   the prompts below
      plus the TEXT_FILEs (the repository's Markdown, long mixed text); ids are
      encode(text, add_special_tokens=False), prompt_ids tokenizer(text)
      .input_ids (the post-processor's specials added), decoded/decoded_skip are
      decode(ids, skip_special_tokens=False/True)
  random: [{ids, decoded, decoded_skip}]   seeded random id sequences, special
      ids and single-byte tokens included, so that decoding meets characters
      cut across tokens and ill-formed UTF-8
  chat: [{messages, ids, text}]   apply_chat_template for one user message, and
      for whole conversations (system, user and assistant turns), with
      add_generation_prompt=True (ids: tokenize=True; text: tokenize=False);
      empty for a tokenizer without a chat template (Gemma 3 270M, the base
      model)
Offline, a few seconds.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from transformers import AutoTokenizer, GenerationConfig  # noqa: E402

PROMPTS = [
    "What is the capital of France?",
    "Qu'est-ce que la tour Eiffel ? Réponds en français.",
    "日本の首都はどこですか？",
    "Emoji: 🙂👍🏽 👨‍👩‍👧 🇫🇷 🧑🏿‍🚀",
    "Ünïcödé: ÀÉÎÕÜ ß ø œ Ωμέγα Привет мир مرحبا 안녕하세요 हिन्दी ไทย",
    "  leading spaces,\ttabs\n\nnewlines\r\n   and trailing  ",
    "In 2024, 12345 apples cost $3.14 (or 1,000,000.5€).",
    "def f(x):\n    return x**2  # square\n\tif x != 0: pass\n",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more <repo_name> x<file_sep>",
    "don't I'll we've they're IT'S it 's a test , right ? yes .",
    "\u00a0non-breaking\u2009thin\u200bzero-width\ufeffBOM",
    "combining e\u0301 vs é; Hangul 한 vs \u1112\u1161\u11ab",
    "a",
    " ",
    "",
    "<|im_end|>",
    "<|im_start",
    "<start_of_turn>user\nHi<end_of_turn>\n<bos>x<eos> <pad>",
    "tabs\t\tand    four spaces, \u2581 the SentencePiece space mark",
]

CHAT_MESSAGES = [
    "What is the capital of France?",
    "Qu'est-ce que la tour Eiffel ? Réponds en français.",
    "日本の首都はどこですか？ 🙂",
    "",
    "multi\nline <|im_end|> {{ not jinja }}",
]
# Whole conversations: a system turn, earlier assistant turns.
CHAT_CONVERSATIONS = [
    [{"role": "system", "content": "You answer in one word."},
     {"role": "user", "content": "Capital of France?"},
     {"role": "assistant", "content": "Paris."},
     {"role": "user", "content": "And of Italy?"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke about caches."}],
]


def main():
    checkpoint, out = Path(sys.argv[1]), Path(sys.argv[2])
    texts = list(PROMPTS) + [Path(p).read_text(encoding="utf-8") for p in sys.argv[3:]]
    tok = AutoTokenizer.from_pretrained(checkpoint)

    eos = []
    for source in (GenerationConfig.from_pretrained(checkpoint).eos_token_id,
                   json.loads((checkpoint / "config.json").read_text()).get("eos_token_id")):
        for i in source if isinstance(source, list) else [] if source is None else [source]:
            if i not in eos:
                eos.append(i)

    def entry(ids, **extra):
        return dict(extra, ids=ids,
                    decoded=tok.decode(ids, skip_special_tokens=False),
                    decoded_skip=tok.decode(ids, skip_special_tokens=True))

    vocab = len(tok)
    special = sorted(tok.all_special_ids)
    rng = random.Random(13)
    # Single-byte tokens: byte-level symbols (SmolLM2) or byte-fallback
    # tokens <0x00>..<0xFF> (Gemma).
    single_bytes = [i for i in range(vocab)
                    if len(t := tok.convert_ids_to_tokens(i)) == 1
                    or (len(t) == 6 and t.startswith("<0x") and t.endswith(">"))]
    randoms = []
    for n in range(200):
        length = rng.randint(1, 24)
        pool = rng.choice(["any", "bytes", "mixed"])
        ids = []
        for _ in range(length):
            r = rng.random()
            if pool == "bytes" or (pool == "mixed" and r < 0.6):
                ids.append(rng.choice(single_bytes))
            elif r < 0.1:
                ids.append(rng.choice(special))
            else:
                ids.append(rng.randrange(vocab))
        randoms.append(entry(ids))

    chats = []
    conversations = [[{"role": "user", "content": m}] for m in CHAT_MESSAGES]
    for conversation in conversations + CHAT_CONVERSATIONS if tok.chat_template else []:
        text = tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        ids = tok.apply_chat_template(conversation, tokenize=True, add_generation_prompt=True,
                                      return_dict=False)
        chats.append(dict(messages=conversation, text=text, ids=list(ids)))

    result = dict(
        vocab_size=vocab,
        eos_ids=eos,
        texts=[entry(tok.encode(t, add_special_tokens=False), text=t,
                     prompt_ids=tok(t).input_ids) for t in texts],
        random=randoms,
        chat=chats,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{out}: {len(result['texts'])} texts, {len(randoms)} random sequences, "
          f"{len(chats)} chat prompts; eos {eos}; {len(single_bytes)} single-byte tokens")


if __name__ == "__main__":
    main()
