#!/usr/bin/env python3
"""Writes transformers' side of the sampling head's cross-check
(test_hf_crosscheck.cpp, "the sampling head's distribution is transformers'").

usage: make_sampling_reference.py OUT_DIR

OUT_DIR/sampling/expected.safetensors holds random logits [rows, vocab], each
row's prompt ids [rows, 16] and settings, and the distribution transformers'
own logits processors give each row, in generate()'s order:
RepetitionPenaltyLogitsProcessor, then TemperatureLogitsWarper,
TopKLogitsWarper, TopPLogitsWarper and MinPLogitsWarper (each only where its
setting is not the default, as generate() builds them), then softmax; a
greedy row's is a point mass on the argmax. Rows differ in every setting so
one batch of the head covers them all. Seeded, offline, under a second.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers.generation.logits_process import (  # noqa: E402
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

VOCAB = 512
PROMPT = 16
# temperature, top_k, top_p, min_p, repetition_penalty
ROWS = [
    (0.7, 0, 0.9, 0.0, 1.0),
    (1.3, 8, 1.0, 0.0, 1.0),
    (1.0, 12, 0.5, 0.05, 1.0),
    (0.9, 0, 1.0, 0.1, 1.3),
    (1.1, 20, 0.8, 0.0, 0.8),
    (0.0, 0, 1.0, 0.0, 1.5),
    (0.6, 40, 0.95, 0.02, 1.2),
]


def processors(temperature, top_k, top_p, min_p, repetition):
    out = LogitsProcessorList()
    if repetition != 1.0:
        out.append(RepetitionPenaltyLogitsProcessor(repetition))
    if temperature > 0:
        out.append(TemperatureLogitsWarper(temperature))
        if top_k > 0:
            out.append(TopKLogitsWarper(top_k))
        if top_p < 1.0:
            out.append(TopPLogitsWarper(top_p))
        if min_p > 0.0:
            out.append(MinPLogitsWarper(min_p))
    return out


def main(out_dir: Path) -> None:
    torch.manual_seed(0)
    logits = torch.randn(len(ROWS), VOCAB) * 3
    prompts = torch.randint(0, VOCAB, (len(ROWS), PROMPT))
    probs = torch.zeros(len(ROWS), VOCAB)
    for r, settings in enumerate(ROWS):
        scores = processors(*settings)(prompts[r : r + 1], logits[r : r + 1].clone())
        if settings[0] > 0:
            probs[r] = scores.softmax(-1)[0]
        else:
            probs[r, scores[0].argmax()] = 1.0
    settings = torch.tensor(ROWS, dtype=torch.float64)
    (out_dir / "sampling").mkdir(parents=True, exist_ok=True)
    save_file(
        {"logits": logits, "prompts": prompts, "settings": settings, "probs": probs},
        str(out_dir / "sampling" / "expected.safetensors"),
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
