"""The serve part's first request at prompt lengths never seen before
(CUDA, --new-lengths): a fresh compiled transformers model against a fresh
statickv-serve with every bucket captured at start."""

import time

import torch

from .common import hf_config, load_hf
from .serve import Server, hf_generate

def new_lengths(args, directory, device, dtype, lengths, deadline, rows, save):
    """First-request time to the first token for prompt lengths never seen
    before: a fresh compiled HF model vs a fresh statickv graph server.
    Appends a row to `rows` (and saves) after each length."""
    vocab = hf_config(args.shape_for_new_lengths).vocab_size
    gen = torch.Generator().manual_seed(args.seed + 7)
    prompts = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]
    hf_model = load_hf(directory, dtype, device, compiled=True)
    server = Server(args.exe, directory, args.device, args.dtype, "bucketed", args.max_len,
                    args.threads)
    try:
        for n, prompt in zip(lengths, prompts):
            if time.perf_counter() > deadline:
                print(f"  (deadline: stopping before length {n})")
                break
            row = {"prompt_len": n}
            start = time.perf_counter()
            _, first, _ = hf_generate(hf_model, prompt, args.new_tokens, device)
            row["hf_compile_first_token_s"] = first
            row["hf_compile_request_s"] = time.perf_counter() - start
            _, warm, _ = hf_generate(hf_model, prompt, args.new_tokens, device)
            row["hf_compile_warm_first_token_s"] = warm
            start = time.perf_counter()
            reply = server.generate(prompt, args.new_tokens)
            row["statickv_first_token_s"] = reply["first_token_s"]
            row["statickv_request_s"] = time.perf_counter() - start
            row["statickv_warm_first_token_s"] = server.generate(prompt, args.new_tokens)[
                "first_token_s"]
            rows.append(row)
            save()
            print(f"  prompt {n:>5}: first token  hf-compile {first * 1e3:10.1f} ms "
                  f"(warm {warm * 1e3:.1f}), whole request {row['hf_compile_request_s']:.2f} s"
                  f"   statickv {reply['first_token_s'] * 1e3:10.1f} ms "
                  f"(warm {row['statickv_warm_first_token_s'] * 1e3:.1f}), whole request "
                  f"{row['statickv_request_s']:.2f} s (every bucket captured at start)",
                  flush=True)
    finally:
        server.close()


def new_lengths_part(args, shape, directory, entry, run, save):
    """new_lengths() for one shape, when the run asks for it (CUDA or
    --cuda-parts-on-cpu, --new-lengths, compiling, before the deadline)."""
    if not (run["cuda"] and args.new_lengths and not args.no_compile
            and time.perf_counter() < run["deadline"]):
        return
    lengths = [int(n) for n in args.new_lengths.split(",")]
    args.shape_for_new_lengths = shape
    print(f"\n  {shape}: first request at new prompt lengths {lengths}")
    torch._dynamo.reset()
    entry["new_lengths"] = []
    new_lengths(args, directory, run["device"], run["dtype"], lengths, run["deadline"],
                entry["new_lengths"], save)
