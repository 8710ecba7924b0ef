"""lm-evaluation-harness against statickv-serve --http: its local-completions
model scores and generates what its own hf backend does on the same
checkpoint.

usage: check_lm_eval.py STATICKV_SERVE LM_EVAL_PYTHON WORKDIR
       (run with a Python that has torch, transformers, tokenizers and openai;
        LM_EVAL_PYTHON has lm-eval[api,hf], scripts/setup.sh's venv-lm-eval)

WORKDIR/tiny gets check_http.py's tiny random Llama and tokenizer, and
WORKDIR/tasks two local tasks written here: a multiple_choice task whose
choices include the model's own greedy next token (so some choices are
greedy) and a generate_until task. lm-eval's hf backend runs them once
(fp32, CPU) as the reference. statickv-serve --http then serves the
checkpoint and lm-eval's local-completions runs them four ways: batch_size
1 and 4 with the server's remote tokenizer (auto-detected through
/tokenizer_info and /tokenize), and batch_size 4 with
tokenizer_backend=huggingface. Requires, for every sample: each choice's
log-likelihood within 1e-4 of the reference and its is_greedy equal, and
every generation identical; the server stops with exit status 0.
"""

import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_http import COMMON, Checks, Server, make_checkpoint  # noqa: E402

NAME = "tiny-eval"
QUESTIONS = ["the cache keeps", "hello world,", "continuous", "What is the capital of France?",
             "streams of tokens:", "You are a helpful"]
DISTRACTORS = [" every row in place", " hello rows", " batching", " Paris is.", " 0123456789"]
# The choices follow the question with no delimiter (target_delimiter ""), so
# a choice that is the model's greedy next token is greedy in lm-eval's sense.
TOL = 1e-4


def greedy_text(model, tok, text, n=1):
    ids = tok.encode(text).ids
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)
    return tok.decode(out[0, len(ids):].tolist())


def write_tasks(directory, model, tok):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "mc.jsonl", "w") as f:
        for i, q in enumerate(QUESTIONS):
            choices = [greedy_text(model, tok, q), *DISTRACTORS[i % 3:i % 3 + 2]]
            f.write(json.dumps({"question": q, "choices": choices, "label": i % 3}) + "\n")
    with open(directory / "gen.jsonl", "w") as f:
        for q in QUESTIONS:
            f.write(json.dumps({"question": q, "answer": "x"}) + "\n")
    common = "dataset_path: json\ntest_split: test\ndoc_to_text: \"{{question}}\"\n"
    (directory / "statickv_mc.yaml").write_text(
        f"task: statickv_mc\n{common}dataset_kwargs:\n  data_files:\n"
        f"    test: {directory / 'mc.jsonl'}\noutput_type: multiple_choice\n"
        "doc_to_choice: \"{{choices}}\"\ndoc_to_target: label\ntarget_delimiter: \"\"\n"
        "metric_list:\n  - metric: acc\n")
    (directory / "statickv_gen.yaml").write_text(
        f"task: statickv_gen\n{common}dataset_kwargs:\n  data_files:\n"
        f"    test: {directory / 'gen.jsonl'}\noutput_type: generate_until\n"
        "doc_to_target: \"{{answer}}\"\ngeneration_kwargs:\n  until: [\"\\n\"]\n"
        "  max_gen_toks: 8\n  do_sample: false\nmetric_list:\n  - metric: exact_match\n"
        "    aggregation: mean\n    higher_is_better: true\n")


def lm_eval(python, tasks, out, model, model_args, batch_size):
    """One lm_eval run: (exit status, its log, {task: samples by doc_id})."""
    env = {**os.environ, "OPENAI_API_KEY": "EMPTY"}
    run = subprocess.run(
        [python, "-m", "lm_eval", "--model", model, "--model_args", model_args,
         "--tasks", "statickv_mc,statickv_gen", "--include_path", str(tasks),
         "--batch_size", str(batch_size), "--device", "cpu", "--output_path", str(out),
         "--log_samples"], capture_output=True, text=True, timeout=600, env=env)
    samples = {}
    for task in ("statickv_mc", "statickv_gen"):
        files = glob.glob(f"{out}/**/samples_{task}_*.jsonl", recursive=True)
        if files:
            samples[task] = {s["doc_id"]: s for s in map(json.loads, open(files[0]))}
    return run.returncode, run.stdout + run.stderr, samples


def compare(c, what, got, want):
    """Log-likelihoods within TOL with is_greedy equal; generations identical."""
    worst, greedy_same, gen_same, greedy_true = 0.0, True, True, 0
    for doc, ref in want.get("statickv_mc", {}).items():
        mine = got.get("statickv_mc", {}).get(doc)
        if mine is None:
            c(False, f"{what}: statickv_mc doc {doc} missing")
            return
        for (a, ga), (b, gb) in zip((r[0] for r in mine["resps"]), (r[0] for r in ref["resps"])):
            worst = max(worst, abs(float(a) - float(b)))
            greedy_same = greedy_same and ga == gb
            greedy_true += gb == "True"
    for doc, ref in want.get("statickv_gen", {}).items():
        mine = got.get("statickv_gen", {}).get(doc, {})
        gen_same = gen_same and mine.get("resps") == ref["resps"]
    n_mc, n_gen = len(want.get("statickv_mc", {})), len(want.get("statickv_gen", {}))
    c(n_mc == len(QUESTIONS) and worst <= TOL and greedy_same,
      f"{what}: {n_mc} multiple-choice docs, log-likelihoods within {worst:.1e} of hf's, "
      f"is_greedy equal ({greedy_true} greedy choices)")
    c(n_gen == len(QUESTIONS) and gen_same, f"{what}: {n_gen} generations identical to hf's")


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__.split("\n\n")[1])
    exe, python, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    start, c = time.monotonic(), Checks()
    tiny, tasks = work / "tiny", work / "tasks"
    tok = make_checkpoint(tiny)
    model = AutoModelForCausalLM.from_pretrained(str(tiny), torch_dtype=torch.float32).eval()
    write_tasks(tasks, model, tok)
    rc, log, want = lm_eval(python, tasks, work / "out-hf", "hf",
                            f"pretrained={tiny},dtype=float32", 1)
    if rc != 0 or len(want) != 2:
        raise SystemExit(f"lm_eval --model hf failed ({rc}): {log[-3000:]}")
    print(f"the reference: lm_eval --model hf ({time.monotonic() - start:.0f} s)", flush=True)
    server = Server(exe, ["--checkpoint", str(tiny), *COMMON, "--max-batch", "8",
                          "--served-model-name", NAME])
    try:
        url = f"http://127.0.0.1:{server.port}/v1/completions"
        base = f"model={NAME},base_url={url},num_concurrent=1,max_retries=1"
        runs = [("batch_size 1, remote tokenizer", f"{base},tokenized_requests=True", 1, True),
                ("batch_size 4, remote tokenizer", f"{base},tokenized_requests=True", 4, True),
                ("batch_size 4, tokenizer_backend=huggingface",
                 f"{base},tokenized_requests=True,tokenizer_backend=huggingface,tokenizer={tiny}",
                 4, False)]
        for i, (what, args, batch, remote) in enumerate(runs):
            t0 = time.monotonic()
            rc, log, got = lm_eval(python, tasks, work / f"out-{i}", "local-completions", args,
                                   batch)
            if not c(rc == 0, f"{what}: lm_eval exits 0 ({time.monotonic() - t0:.0f} s)"):
                print(log[-3000:])
                continue
            if remote:
                c("remote tokenizer" in log.lower(), f"{what}: lm-eval chose the remote tokenizer")
            compare(c, what, got, want)
    finally:
        c.stopped(server)
    return c.exit_status(start)


if __name__ == "__main__":
    sys.exit(main())
