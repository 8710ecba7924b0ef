"""What every part of hf_compare.py shares: transformers' configs of the
named shapes, their seeded checkpoints, loading a model, the streamer that
times each token, compile settings and the median [p10, p90] summaries.

Importing it sets transformers offline (nothing is downloaded) before torch
and transformers load.
"""

import os
import platform
import statistics
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from transformers import CompileConfig, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.generation.streamers import BaseStreamer  # noqa: E402

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def hf_config(shape):
    """Transformers' LlamaConfig for statickv's named shapes (reference/src/checkpoint.cpp)."""
    if shape == "tiny":
        return LlamaConfig(
            vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            bos_token_id=None, eos_token_id=None, pad_token_id=None,
        )  # fmt: skip
    if shape == "llama-3.2-1b":
        return LlamaConfig(
            vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=32, num_key_value_heads=8, head_dim=64,
            max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=True,
            rope_parameters={
                "rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            # No EOS: every request runs its full new_tokens on both sides.
            bos_token_id=None, eos_token_id=None, pad_token_id=None,
        )  # fmt: skip
    raise SystemExit(f"--shapes: expected tiny or llama-3.2-1b but got {shape}")


def checkpoint(workdir, shape, seed, device):
    """The shape's checkpoint directory, made once (random weights, seeded,
    stored in bf16: half the disk; both sides load the same rounded weights
    into the compute dtype)."""
    dtype_name = "bf16"
    directory = Path(workdir) / f"{shape}-seed{seed}"
    if (directory / "config.json").exists() and any(directory.glob("*.safetensors")):
        return directory
    start = time.perf_counter()
    torch.manual_seed(seed)
    config = hf_config(shape)
    with torch.device(device):  # random init on the GPU when there is one: much faster
        model = LlamaForCausalLM(config).to(DTYPES[dtype_name]).eval()
    model.save_pretrained(directory, safe_serialization=True)
    print(f"  saved {shape} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, "
          f"{dtype_name}) to {directory} in {time.perf_counter() - start:.1f} s", flush=True)
    return directory


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class TokenTimes(BaseStreamer):
    """Host time of every streamer.put: the prompt, then each new token
    (generate copies each token to the host first, so the device is done)."""

    def __init__(self):
        self.times = []

    def put(self, value):
        self.times.append(time.perf_counter())

    def end(self):
        pass


def load_hf(directory, dtype, device, compiled):
    model = LlamaForCausalLM.from_pretrained(directory, dtype=dtype, attn_implementation="sdpa",
                                             use_kernels=False)
    model = model.to(device).eval()
    model.statickv_compiled = compiled  # read by hf_generate
    return model


def compile_config(device, backend="inductor"):
    """transformers' auto-compile settings for the hf-compile variant: the
    one place compilation is set up for transformers' generate()."""
    if backend == "inductor":
        config = CompileConfig(fullgraph=True, mode="reduce-overhead")
    else:  # eager / aot_eager: checks the plumbing quickly (modes are Inductor's)
        config = CompileConfig(fullgraph=True, backend=backend, mode=None)
    if device.type != "cuda":
        # --cuda-parts-on-cpu: transformers only auto-compiles on accelerators
        # unless told otherwise (a private switch of its own tests).
        config._compile_all_devices = True
    return config


def summary(values):
    values = sorted(values)
    if not values:
        return None

    def at(f):
        return values[min(len(values) - 1, int(f * (len(values) - 1) + 0.5))]

    return {"median": statistics.median(values), "p10": at(0.1), "p90": at(0.9)}


def text(s, scale=1.0, digits=2):
    if s is None:
        return "-"
    return f"{s['median'] * scale:.{digits}f} [{s['p10'] * scale:.{digits}f}, {s['p90'] * scale:.{digits}f}]"
