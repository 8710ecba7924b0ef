"""--parts seeds: the two problems statickv was built for, end to end with
compile time included, through the Python package (hf_compare.py's
docstring)."""

import time

import torch
from transformers import StaticCache

from .common import hf_config, load_hf

SEED_BATCHES = [4, 2, 3, 1]  # transformers PR 37394 / issue 42454
SEED_LENGTHS = [17 + 7 * i for i in range(15)] + [120]  # issue 29151: 16 new lengths


def compile_forward(model, device, backend):
    """What a user writes: the forward compiled at static shapes (Inductor;
    CUDA graphs too on a GPU)."""
    mode = "reduce-overhead" if device.type == "cuda" and backend == "inductor" else None
    model.forward = torch.compile(model.forward, backend=backend, dynamic=False, fullgraph=True,
                                  mode=mode)
    return model


def hf_static_request(model, ids, new_tokens, max_len):
    """transformers' StaticCache, fresh per call: it allocates for its first
    update's batch and cannot serve another one afterwards."""
    text = model.config
    cache = StaticCache(config=text, max_cache_len=max_len)
    cache.early_initialization(ids.shape[0], text.num_key_value_heads, text.head_dim,
                               model.dtype, ids.device)
    return model.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                          max_new_tokens=new_tokens, do_sample=False, disable_compile=True,
                          pad_token_id=0)


def timed_requests(request, inputs, device):
    """Runs the requests in order from a clean dynamo state: total seconds
    (compiles included), per-request seconds, graphs compiled, outputs."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    seconds, outputs = [], []
    start = time.perf_counter()
    for ids, new_tokens in inputs:
        t = time.perf_counter()
        with torch.no_grad():
            outputs.append(request(ids.to(device), new_tokens).cpu())
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - t)
    total = time.perf_counter() - start
    graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    return {"total_s": total, "request_s": seconds, "graphs": graphs, "graph_breaks": breaks,
            "outputs": outputs}


def seed_inputs(vocab, seed, prompt_len, new_tokens, count=len(SEED_LENGTHS)):
    """The 37394 batches, then the first `count` of the 29151 prompt lengths."""
    gen = torch.Generator().manual_seed(seed)
    batches = [(torch.randint(1, vocab, (b, prompt_len), generator=gen), new_tokens)
               for b in SEED_BATCHES]
    lengths = [(torch.randint(1, vocab, (1, n), generator=gen), new_tokens)
               for n in SEED_LENGTHS[:count]]
    return {"seed_37394": batches, "seed_29151": lengths}


def seed_scenarios(args, directory, device, dtype, entry, save):
    """The two seed scenarios end to end, compile time included: transformers'
    StaticCache (fresh per call) against one statickv.hf.StaticKVCache, both
    with the forward compiled by the user."""
    max_len = 128 + args.new_tokens  # the largest prompt bucket, then the new tokens
    inputs = seed_inputs(hf_config(entry["shape"]).vocab_size, args.seed, 48, args.new_tokens,
                         args.seed_lengths)
    # transformers recompiles per batch size and prompt length: past dynamo's
    # default limit (8) it would fail, so it gets room to finish.
    torch._dynamo.config.recompile_limit = 64
    # Cold compiles on both sides: Inductor's on-disk caches would hand a
    # rerun the graphs an earlier run compiled.
    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False
    hf = compile_forward(load_hf(directory, dtype, device, compiled=False), device,
                         args.compile_backend)
    hf_runs = {name: timed_requests(lambda ids, n: hf_static_request(hf, ids, n, max_len), rows,
                                    device) for name, rows in inputs.items()}
    del hf
    torch._dynamo.config.recompile_limit = 8
    hf_ids = {name: run.pop("outputs") for name, run in hf_runs.items()}
    entry["seeds"] = {name: {"hf_static": hf_runs[name], "statickv": {}} for name in inputs}
    for buckets in args.seed_prompt_buckets:
        sk_runs = statickv_seed_runs(args, directory, device, dtype, max_len, buckets, inputs)
        label = ",".join(map(str, buckets))
        for name in inputs:
            entry["seeds"][name]["statickv"][label] = seed_side(hf_runs[name], hf_ids[name],
                                                                sk_runs[name])
        save()
    print_seeds(entry["seeds"])


def statickv_seed_runs(args, directory, device, dtype, max_len, prompt_buckets, inputs):
    """Both scenarios on one fresh StaticKVCache with these prompt buckets,
    from a clean dynamo state (a fresh model, so nothing compiled carries over)."""
    import statickv.hf  # the Python package (pip install --no-build-isolation .)

    model = compile_forward(load_hf(directory, dtype, device, compiled=False), device,
                            args.compile_backend)
    cache = statickv.hf.StaticKVCache(model.config, max_batch_size=4, max_cache_len=max_len,
                                      device=device, dtype=dtype, batch_buckets=[1, 2, 4],
                                      prompt_buckets=prompt_buckets)
    return {name: timed_requests(
        lambda ids, n: statickv.hf.generate(model, cache, ids, max_new_tokens=n), rows, device)
        for name, rows in inputs.items()}


def seed_side(hf, hf_ids, sk):
    """One statickv run against transformers' run of the same requests."""
    sk["same_tokens"] = all(torch.equal(a, b) for a, b in zip(hf_ids, sk.pop("outputs")))
    sk["speedup_total"] = hf["total_s"] / sk["total_s"]
    return sk


def print_seeds(rows):
    print("\n  seed scenarios (compile time included)      total s  graphs  breaks", flush=True)
    for name, row in rows.items():
        sides = [("hf_static", row["hf_static"])]
        sides += [(f"statickv buckets {label}", r) for label, r in row["statickv"].items()]
        for side, r in sides:
            print(f"  {name:11s} {side:28s} {r['total_s']:8.1f}  {r['graphs']:6d}  "
                  f"{r['graph_breaks']:6d}")
        for label, r in row["statickv"].items():
            print(f"  {name:11s} statickv (buckets {label}) faster in total: "
                  f"{r['speedup_total']:.1f}x; same tokens: {r['same_tokens']}")
