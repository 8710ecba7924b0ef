"""--parts roofline: decode tokens/s at --roofline-batches, transformers'
compiled static cache against statickv-demo's plain and fused paths, and
dynamo's recompiles at a new prompt length."""

import time
from pathlib import Path

import torch

from .batches import hf_batch, print_real_model_batch, real_model_batch, statickv_batch
from .common import DTYPES, checkpoint, compile_config, hf_config, load_hf

def recompiles_at_new_length(model, prompt, new_tokens, device, compiled):
    """Graphs dynamo compiles for one request at a prompt length not seen
    before (the compiled model already warm at len(prompt))."""
    before = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    longer = (prompt * 2)[:len(prompt) + 37]
    hf_batch(model, longer, 1, new_tokens, "static", device, compiled)
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"]) - before


def roofline(args, shape, results, save, deadline=float("inf")):
    """Decode tokens/s at each --roofline-batches: transformers' static cache
    with its compiled decode step (compile_config, as its docs say) against
    statickv-demo on the plain and the fused path; then, before `deadline`
    (perf_counter seconds), dynamo's recompiles for a new prompt length."""
    device = torch.device(args.device)
    directory = checkpoint(args.workdir, shape, args.seed, device)
    vocab = hf_config(shape).vocab_size
    prompt = torch.randint(1, vocab, (args.prompt_len,),
                           generator=torch.Generator().manual_seed(args.seed + 1)).tolist()
    model = load_hf(directory, DTYPES[args.dtype], device, compiled=True)
    compiled = compile_config(device, args.compile_backend)
    scratch = Path(args.workdir) / "statickv-demo-roofline.json"
    scratch.parent.mkdir(parents=True, exist_ok=True)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    variants = {
        "hf-compile": lambda b: hf_batch(model, prompt, b, args.new_tokens, "static", device,
                                         compiled),
        "statickv": lambda b: statickv_batch(args, prompt, b, args.new_tokens, scratch, directory),
        "statickv-fused": lambda b: statickv_batch(args, prompt, b, args.new_tokens, scratch,
                                                   directory, "fused"),
    }
    entry = {"shape": shape, "batches": []}
    results.setdefault("roofline", []).append(entry)
    for batch in [int(b) for b in args.roofline_batches.split(",")]:
        entry["batches"].append(real_model_batch(args, variants, prompt, batch, scratch))
        print_real_model_batch(entry["batches"][-1])
        save()
    if time.perf_counter() > deadline:
        print(f"  {shape}: (deadline: no recompile count for a new prompt length)", flush=True)
        return
    entry["hf_recompiles_per_new_length"] = recompiles_at_new_length(
        model, prompt, args.new_tokens, device, compiled)
    print(f"  {shape}: dynamo compiled {entry['hf_recompiles_per_new_length']} new graph(s) for "
          f"a new prompt length", flush=True)
    save()
