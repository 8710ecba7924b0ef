#!/usr/bin/env python3
"""Exports examples/aoti/decoder.py for one statickv cache shape and compiles
it with AOTInductor into one .pt2 package (docs/aoti.md).

usage: export.py --checkpoint DIR --out FILE.pt2 [--max-batch 4] [--max-len 64]
                 [--max-chunk 16] [--dtype float32] [--device cpu] [--threads N]

One program serves every step: the batch (1..max_batch), the query length
(1..max_chunk: decode and prefill chunks) and the attended length of the full
layers (1..max_len) are dynamic (torch.export.Dim); the cache buffers are
static, [max_batch, kv_heads, capacity + 1, head_dim] per layer. The package's
metadata carries statickv's fingerprint of that cache (statickv.* keys, read
by statickv::aoti::check_fingerprint in C++), so a package built for another
shape, dtype or layer layout is refused before it runs.

The package is rebuilt only when its key changes: a hash of this script, the
decoder, the torch version, the arguments and the checkpoint's files. FILE.key
holds the key of FILE; a matching key skips the export (ctest's package
fixture relies on this to build each package once per build tree).
"""

import argparse
import hashlib
import importlib.metadata
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# torch, statickv and the decoder are imported only when a package is built:
# an up-to-date package is found without them, in a fraction of a second.

# How the C++ side spells each dtype (c10::toString(at::ScalarType)).
DTYPES = {"float32": "Float", "float16": "Half", "bfloat16": "BFloat16"}
# The layout of the flat input list; the C++ runner refuses any other.
INPUTS = "ids,positions,slots[types],masks[types],keys[layers],values[layers]"


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--checkpoint", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--max-batch", type=int, default=4)
    p.add_argument("--max-len", type=int, default=64)
    p.add_argument("--max-chunk", type=int, default=16)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU: OpenMP threads of the generated kernels (Inductor writes the "
                        "count into the code: num_threads(N)); 0 = torch's default here")
    args = p.parse_args()
    if args.threads < 0:
        p.error(f"--threads: expected >= 0 but got {args.threads}")
    for flag in ("max_batch", "max_len", "max_chunk"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')}: expected >= 1 but got {getattr(args, flag)}")
    if args.max_chunk > args.max_len:
        p.error(f"--max-chunk: expected <= --max-len={args.max_len} but got {args.max_chunk}")
    return args


def capacities(config, max_len, max_chunk):
    """Slots per layer (the scratch slot excluded), as statickv's CacheConfig
    computes them: max_len for a full layer; for a sliding ring
    min(min(window, max_len) + max_chunk - 1, max_len) (Note [ring capacity])."""
    ring = min(min(config["sliding_window"], max_len) + max_chunk - 1, max_len)
    return [max_len if t == "full" else ring for t in config["layer_types"]]


def fingerprint(config, args):
    """statickv's fingerprint of the cache the package is built for: the keys
    statickv::aoti::fingerprint(CacheConfig) writes, plus the package's own
    limits (max_query, vocab_size), which no cache field decides."""
    caps = capacities(config, args.max_len, args.max_chunk)
    return {
        "statickv.inputs": INPUTS,
        "statickv.num_layers": str(config["num_layers"]),
        "statickv.num_kv_heads": str(config["kv_heads"]),
        "statickv.head_dim": str(config["head_dim"]),
        "statickv.max_batch": str(args.max_batch),
        "statickv.layer_types": ",".join(config["layer_types"]),
        "statickv.sliding_window": str(config["sliding_window"]),
        "statickv.capacities": ",".join(str(c) for c in caps),
        "statickv.dtype": DTYPES[args.dtype],
        "statickv.device": args.device,
        "statickv.max_query": str(args.max_chunk),
        "statickv.vocab_size": str(config["vocab"]),
    }


def package_key(args):
    h = hashlib.sha256()
    for source in (HERE / "export.py", HERE / "decoder.py"):
        h.update(source.read_bytes())
    h.update(importlib.metadata.version("torch").encode())
    # The checkpoint counts by its files' contents, not by its path.
    settings = {k: str(v) for k, v in sorted(vars(args).items()) if k not in ("out", "checkpoint")}
    h.update(json.dumps(settings).encode())
    for f in sorted(args.checkpoint.glob("*")):
        if f.suffix in (".json", ".safetensors"):
            h.update(f.name.encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def example_inputs(model, args, dtype, device):
    """Inputs of the traced example step, and which of their dimensions vary."""
    import torch
    from torch.export import Dim

    c = model.config
    b, q, attend = min(2, args.max_batch), min(3, args.max_chunk), min(5, args.max_len)
    caps = capacities(c, args.max_len, args.max_chunk)
    present = model.present
    view = {"full": attend, "sliding": caps[c["layer_types"].index("sliding")]
            if "sliding" in present else 0}
    long = dict(dtype=torch.long, device=device)
    ids = torch.zeros(b, q, **long)
    positions = torch.zeros(b, q, **long)
    slots = [torch.zeros(b, q, **long) for _ in present]
    masks = [torch.zeros(b, 1, q, view[t], dtype=dtype, device=device) for t in present]
    shape = lambda cap: (args.max_batch, c["kv_heads"], cap + 1, c["head_dim"])  # noqa: E731
    keys = [torch.zeros(shape(cap), dtype=dtype, device=device) for cap in caps]
    values = [torch.zeros(shape(cap), dtype=dtype, device=device) for cap in caps]
    B = Dim("batch", min=1, max=args.max_batch)
    Q = Dim("query", min=1, max=args.max_chunk)
    A = Dim("attend", min=1, max=args.max_len)
    row = {0: B, 1: Q}
    mask_dims = [{0: B, 2: Q, 3: A} if t == "full" else {0: B, 2: Q} for t in present]
    dynamic = (row, row, [row] * len(present), mask_dims, [None] * len(caps), [None] * len(caps))
    return (ids, positions, slots, masks, keys, values), dynamic


def main():
    args = parse()
    key = package_key(args)
    key_file = args.out.with_name(args.out.name + ".key")
    if args.out.is_file() and key_file.is_file() and key_file.read_text().strip() == key:
        print(f"{args.out}: up to date (key {key[:16]})")
        return
    start = time.time()
    import torch

    sys.path.insert(0, str(HERE))
    from decoder import Decoder

    if args.threads:
        torch.set_num_threads(args.threads)  # what Inductor's CPU kernels are written for
    dtype, device = getattr(torch, args.dtype), torch.device(args.device)
    model = Decoder(args.checkpoint, dtype).to(device).eval()
    inputs, dynamic = example_inputs(model, args, dtype, device)
    with torch.no_grad():
        program = torch.export.export(model, inputs, dynamic_shapes=dynamic)
    exported = time.time()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    key_file.unlink(missing_ok=True)
    torch._inductor.aoti_compile_and_package(
        program,
        package_path=str(args.out),
        inductor_configs={"aot_inductor.metadata": fingerprint(model.config, args)},
    )
    key_file.write_text(key + "\n")
    print(f"{args.out}: exported in {exported - start:.1f} s, compiled in "
          f"{time.time() - exported:.1f} s (key {key[:16]})")


if __name__ == "__main__":
    main()
