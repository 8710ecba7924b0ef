"""--parts smollm2: a real model, SmolLM2-135M-Instruct (--checkpoint,
--demo), against transformers' DynamicCache and StaticCache (hf_compare.py's
docstring)."""

from pathlib import Path

import torch
from transformers import LlamaForCausalLM

from .batches import hf_batch, print_real_model_batch, real_model_batch, statickv_batch
from .common import DTYPES

CHAT_TEXT = (
    "A key-value cache keeps the keys and values of every token a transformer has already "
    "seen, so that each new token attends to them without recomputing them. Explain in a few "
    "sentences why a cache whose buffers are allocated once, at a fixed size, suits CUDA graphs, "
    "and what it costs when the batch is smaller than the buffers."
)


def chat_ids(tokenizer, text):
    return tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                         add_generation_prompt=True, return_dict=True)["input_ids"]


def real_model(args, results, save):
    """The smollm2 scenario (hf_compare.py's docstring)."""
    from transformers import AutoTokenizer

    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    prompt = chat_ids(AutoTokenizer.from_pretrained(args.checkpoint), args.chat_text)
    model = LlamaForCausalLM.from_pretrained(args.checkpoint, dtype=dtype,
                                             attn_implementation="sdpa",
                                             use_kernels=False).to(device).eval()
    scratch = Path(args.workdir) / "statickv-demo.json"
    scratch.parent.mkdir(parents=True, exist_ok=True)
    variants = {
        "hf-dynamic": lambda b: hf_batch(model, prompt, b, args.new_tokens, None, device),
        "hf-static": lambda b: hf_batch(model, prompt, b, args.new_tokens, "static", device),
        "statickv": lambda b: statickv_batch(args, prompt, b, args.new_tokens, scratch),
    }
    if args.compile:
        compiled = LlamaForCausalLM.from_pretrained(args.checkpoint, dtype=dtype,
                                                    attn_implementation="sdpa",
                                                    use_kernels=False).to(device).eval()
        compiled.forward = torch.compile(compiled.forward, fullgraph=True, dynamic=False)
        variants["hf-static-compile"] = lambda b: hf_batch(compiled, prompt, b, args.new_tokens,
                                                           "static", device)
    results["scenario"] = "smollm2"
    results["checkpoint"] = Path(args.checkpoint).name
    results["batches"] = []
    for batch in [int(b) for b in args.batches.split(",")]:
        results["batches"].append(real_model_batch(args, variants, prompt, batch, scratch))
        print_real_model_batch(results["batches"][-1])
        save()
