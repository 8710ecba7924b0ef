"""What the checkpoint converters under tools/ share: logging, failing with
an exit status, the output directory's lock and stamp, and loading a
dequantized state dict into a plain transformers model."""

import argparse
import contextlib
import hashlib
import json
import os
import sys
import time
from pathlib import Path


class Converter:
    STAMP = "convert.stamp.json"

    def __init__(self, name, version, output_files):
        self.name = name
        self.version = version
        self.output_files = tuple(output_files)
        self.t0 = time.monotonic()

    def log(self, message):
        print(f"[{self.name} {time.monotonic() - self.t0:6.1f}s] {message}", flush=True)

    @staticmethod
    def fail(message, status=1):
        print(f"convert.py: error: {message}", file=sys.stderr, flush=True)
        sys.exit(status)

    @staticmethod
    def sha256(path):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()

    def stamp(self, dtype, source):
        return {"tool_version": self.version, "dtype": dtype, **source}

    def up_to_date(self, out, dtype, source):
        """The stamp matches this version, dtype and every key of `source`,
        and every output file is there."""
        try:
            stamp = json.loads((out / self.STAMP).read_text())
        except (OSError, ValueError):
            return False
        if any(stamp.get(key) != value for key, value in self.stamp(dtype, source).items()):
            return False
        return all((out / name).is_file() for name in self.output_files)

    def clear_stamp(self, out):
        (out / self.STAMP).unlink(missing_ok=True)

    def write_stamp(self, out, dtype, source):
        stamp = self.stamp(dtype, source)
        stamp["seconds"] = round(time.monotonic() - self.t0, 1)
        (out / self.STAMP).write_text(json.dumps(stamp, indent=2) + "\n")

    @contextlib.contextmanager
    def locked(self, out):
        """One conversion at a time per OUT_DIR (parallel ctest runs, two shells)."""
        import fcntl

        with open(out / ".convert.lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def check_packages(self, names):
        import importlib.util

        missing = [name for name in names if importlib.util.find_spec(name) is None]
        if missing:
            self.fail(f"{sys.executable} lacks the Python packages {', '.join(missing)}: "
                      f"scripts/setup.sh installs them into .venv (gguf, accelerate, "
                      f"transformers, torch)")

    def dequantized(self, gguf, model_type, model_class, dtype):
        """The GGUF's tensors dequantized by transformers' GGUF loader, in a
        plain `model_class` in `dtype` (save_pretrained refuses a model that
        still carries the GGUF quantization config)."""
        import torch
        from transformers import AutoModelForCausalLM

        quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                         dtype=torch.float32,
                                                         use_kernels=False)
        config = quantized.config
        if config.model_type != model_type:
            self.fail(f"expected a {model_type} model in the GGUF, got {config.model_type}")
        state = quantized.state_dict()
        generation_config = quantized.generation_config
        del quantized
        config = type(config).from_dict(config.to_dict())
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.dtype = dtype
        with torch.device("meta"):
            model = model_class(config)
        self.load_state(model, state, dtype, config.tie_word_embeddings)
        model.generation_config = generation_config
        return model

    def load_state(self, model, state, dtype, tied):
        """Loads a dequantized state dict into a model built on the meta device;
        only a tied lm_head may be missing."""
        missing, unexpected = model.load_state_dict(
            {k: v.to(dtype) for k, v in state.items()}, strict=False, assign=True)
        missing = [k for k in missing if not (k == "lm_head.weight" and tied)]
        if missing or unexpected:
            self.fail(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
        model.tie_weights()
        model.eval()

    def require_outputs(self, out):
        for name in self.output_files:
            if not (out / name).is_file():
                self.fail(f"{name} was not written")

    def main(self, description, check_help, source, build, check):
        """The converters' command line, OUT_DIR [--dtype T] [--check]:
        under OUT_DIR's lock, `build(out, dtype)` converts unless the stamp
        matches `source` (it returns more stamp fields, or None); then, with
        --check, `check(out)`."""
        parser = argparse.ArgumentParser(description=description)
        parser.add_argument("out", type=Path, help="output directory (the checkpoint)")
        parser.add_argument("--dtype", default="float32",
                            choices=("float32", "bfloat16", "float16"))
        parser.add_argument("--check", action="store_true", help=check_help)
        args = parser.parse_args()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything below is local files
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        out = args.out.resolve()
        out.mkdir(parents=True, exist_ok=True)
        with self.locked(out):
            if self.up_to_date(out, args.dtype, source):
                self.log(f"{out} is up to date ({self.STAMP})")
            else:
                self.clear_stamp(out)
                self.check_packages(("torch", "transformers", "gguf", "accelerate"))
                extra = build(out, args.dtype) or {}
                self.write_stamp(out, args.dtype, {**source, **extra})
                self.log(f"done: {out}")
        if args.check:
            self.check_packages(("torch", "transformers"))
            check(out)
