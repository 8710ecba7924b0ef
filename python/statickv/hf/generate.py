"""statickv.hf.generate: statickv's own generation loop around model(...).

Batch and prompt are padded to the cache's buckets, so a forward compiled
with torch.compile(dynamic=False) compiles at most once per bucket: prefill
once per (prefill batch bucket, prompt bucket), decode once per batch bucket.
Masks are statickv's own, per layer type (a ring puts position p in slot
p % capacity, so transformers' sliding mask, which reads key index i as a
position offset, would be wrong once a row wraps). Returns what
model.generate returns for the same arguments: the input ids followed by the
new ids, rows that finished padded with pad_token_id.
"""

import copy
from dataclasses import dataclass

import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

_SUPPORTED = {"max_new_tokens", "max_length", "do_sample", "temperature", "top_k", "top_p",
              "eos_token_id", "pad_token_id", "bos_token_id", "use_cache",
              "prompt_lookup_num_tokens", "max_matching_ngram_size", "assistant_model",
              "num_assistant_tokens", "num_beams", "early_stopping", "length_penalty",
              "num_return_sequences"}


@dataclass
class _Options:
    max_new_tokens: int
    do_sample: bool
    processors: LogitsProcessorList
    eos: torch.Tensor | None
    pad_token_id: int
    drafts: int = 0  # speculation: the most draft tokens per row and step (0: plain decode)
    ngram: int = 2  # prompt lookup: the longest n-gram matched
    assistant: object = None  # assisted decoding: the draft model
    num_beams: int = 1  # beam search (greedy beams)
    early_stopping: object = False
    length_penalty: float = 1.0


def _options(model, input_len, kwargs):
    unsupported = sorted(set(kwargs) - _SUPPORTED)
    if unsupported:
        raise ValueError(f"generate_kwargs: expected only {sorted(_SUPPORTED)} but got "
                         f"{unsupported}")
    config = copy.deepcopy(model.generation_config)
    config.update(**kwargs)
    new = config.max_new_tokens
    if new is None:
        new = config.max_length - input_len
    processors = LogitsProcessorList()
    if config.do_sample:
        if config.temperature is not None and config.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(config.temperature))
        if config.top_k is not None and config.top_k != 0:
            processors.append(TopKLogitsWarper(config.top_k))
        if config.top_p is not None and config.top_p < 1.0:
            processors.append(TopPLogitsWarper(config.top_p))
    eos = config.eos_token_id
    eos = None if eos is None else torch.tensor(eos if isinstance(eos, list) else [eos])
    pad = config.pad_token_id
    pad = pad if pad is not None else (int(eos[0]) if eos is not None else 0)
    options = _Options(new, bool(config.do_sample), processors, eos, pad)
    return _beams(_speculation(options, config, kwargs), config)


def _beams(options, config):
    """Beam search (num_beams > 1): greedy beams, one sequence per prompt,
    no speculation beside it."""
    beams = config.num_beams or 1
    if beams == 1:
        return options
    if not isinstance(beams, int) or beams < 1:
        raise ValueError(f"num_beams: expected an integer >= 1 but got {beams!r}")
    if options.do_sample:
        raise ValueError("do_sample: expected False with num_beams > 1 (beam sampling is not "
                         "supported) but got True")
    if options.drafts:
        raise ValueError("num_beams: expected 1 with prompt_lookup_num_tokens or "
                         f"assistant_model but got {beams}")
    if (config.num_return_sequences or 1) != 1:
        raise ValueError(f"num_return_sequences: expected 1 but got "
                         f"{config.num_return_sequences}")
    options.num_beams = beams
    options.early_stopping = config.early_stopping
    options.length_penalty = config.length_penalty if config.length_penalty is not None else 1.0
    return options


def _speculation(options, config, kwargs):
    """Prompt-lookup (prompt_lookup_num_tokens) or assisted (assistant_model)
    decoding: greedy only, one of the two."""
    lookup = kwargs.get("prompt_lookup_num_tokens")
    assistant = kwargs.get("assistant_model")
    if lookup is None and assistant is None:
        return options
    if lookup is not None and assistant is not None:
        raise ValueError("prompt_lookup_num_tokens: expected it or assistant_model, not both")
    name = "prompt_lookup_num_tokens" if lookup is not None else "assistant_model"
    if options.do_sample:
        raise ValueError(f"do_sample: expected False with {name} (statickv.hf.generate "
                         "verifies drafts greedily) but got True")
    drafts = lookup
    if assistant is not None:
        drafts = kwargs.get("num_assistant_tokens", config.num_assistant_tokens)
        drafts = 20 if drafts is None else drafts  # transformers' documented default
    name = "prompt_lookup_num_tokens" if lookup is not None else "num_assistant_tokens"
    if not isinstance(drafts, int) or drafts < 1:
        raise ValueError(f"{name}: expected an integer >= 1 but got {drafts!r}")
    options.drafts = drafts
    options.ngram = kwargs.get("max_matching_ngram_size") or 2
    options.assistant = assistant
    return options


def _prompt_lengths(input_ids, attention_mask):
    """Real tokens per row, checking that padding is on the left."""
    if attention_mask is None:
        return torch.full((input_ids.shape[0],), input_ids.shape[1], dtype=torch.long)
    mask = attention_mask.to("cpu", torch.long)
    if mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask: expected the shape of input_ids "
                         f"{list(input_ids.shape)} but got {list(mask.shape)}")
    lengths = mask.sum(1)
    left = torch.arange(mask.shape[1]).unsqueeze(0) >= (mask.shape[1] - lengths).unsqueeze(1)
    if not torch.equal(mask.bool(), left):
        raise ValueError("attention_mask: expected left padding (each row's ones at its end), "
                         "as transformers uses for generation")
    if int(lengths.min()) < 1:
        raise ValueError("attention_mask: expected at least one real token per row but a row "
                         "has none")
    return lengths


def _check(cache, input_ids, lengths, options):
    b = input_ids.shape[0]
    if input_ids.dim() != 2 or b < 1:
        raise ValueError(f"input_ids: expected [batch, length] but got {list(input_ids.shape)}")
    if options.num_beams == 1 and b > cache.max_batch_size:
        raise ValueError(f"input_ids: expected a batch <= max_batch_size="
                         f"{cache.max_batch_size} but got {b}")
    if b * options.num_beams > cache.max_batch_size:
        raise ValueError(f"input_ids: expected batch * num_beams <= max_batch_size="
                         f"{cache.max_batch_size} but got {b} * {options.num_beams}")
    if options.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected >= 1 but got {options.max_new_tokens}")
    total = int(lengths.max()) + options.max_new_tokens
    if total > cache.max_cache_len:
        raise ValueError(f"max_new_tokens: expected prompt length + max_new_tokens <= "
                         f"max_cache_len={cache.max_cache_len} but got {int(lengths.max())} + "
                         f"{options.max_new_tokens} = {total}")
    if options.drafts:
        name = "prompt_lookup_num_tokens" if options.assistant is None else "num_assistant_tokens"
        if options.drafts + 1 > cache.max_chunk:
            raise ValueError(f"{name}: expected {name} + 1 = {options.drafts + 1} tokens per "
                             f"verification step to fit the cache's max_chunk={cache.max_chunk} "
                             f"but got {name}={options.drafts}")
        if options.assistant is not None and b != 1:
            raise ValueError(f"input_ids: expected a batch of 1 with assistant_model (as "
                             f"transformers) but got {b}")


def _forward(model, cache, ids, positions):
    """One forward at a bucketed shape: the host plans the step, the (maybe
    compiled) forward runs with statickv's masks."""
    device = cache.layers[0].keys.device
    positions = positions.to(device)  # prepare() takes positions on the cache's device
    masks = cache.begin_step(positions, ids.shape[0])
    out = model(input_ids=ids.to(device), attention_mask=masks,
                position_ids=positions.clamp_min(0), cache=cache, use_cache=True)
    return out.logits


def _prefill(model, cache, input_ids, lengths):
    """Prefills every row in chunks of at most the largest prompt bucket;
    returns each row's last-token logits [b, vocab] (float32)."""
    b, width = input_ids.shape
    batch = cache.prefill_batch_buckets.round_up(b)
    chunk = cache.prompt_buckets.max
    longest = int(lengths.max())
    offsets = torch.arange(longest)
    valid = offsets.unsqueeze(0) < lengths.unsqueeze(1)  # [b, longest]
    columns = (offsets.unsqueeze(0) + (width - lengths).unsqueeze(1)).clamp(max=width - 1)
    tokens = input_ids.cpu().gather(1, columns)  # real tokens, left-aligned
    last = None
    for start in range(0, longest, chunk):
        q = min(chunk, longest - start)
        bucket = cache.prompt_buckets.round_up(q)
        ids = torch.zeros(batch, bucket, dtype=torch.long)
        positions = torch.full((batch, bucket), -1, dtype=torch.long)
        ids[:b, :q] = tokens[:, start:start + q]
        positions[:b, :q] = torch.where(valid[:, start:start + q], offsets[start:start + q], -1)
        logits = _forward(model, cache, ids, positions)
        index = (lengths - 1 - start).clamp(0, bucket - 1).to(logits.device)
        picked = logits[torch.arange(b, device=logits.device), index].float()
        here = ((lengths - 1 >= start) & (lengths - 1 < start + q)).to(logits.device)
        last = picked if last is None else torch.where(here.unsqueeze(1), picked, last)
    return last


def _decode(model, cache, tokens, positions):
    """One decode step for b rows at the batch bucket; logits [b, vocab]."""
    b = tokens.shape[0]
    batch = cache.batch_buckets.round_up(b)
    ids = torch.zeros(batch, 1, dtype=torch.long)
    padded = torch.full((batch, 1), -1, dtype=torch.long)
    ids[:b, 0] = tokens.cpu()
    padded[:b, 0] = positions
    return _forward(model, cache, ids, padded)[:b, -1].float()


def _choose(logits, sequences, options):
    """The next token as model.generate picks it (greedy or sampled)."""
    scores = options.processors(sequences, logits)
    if options.do_sample:
        probs = torch.nn.functional.softmax(scores, dim=-1)
        return torch.multinomial(probs, num_samples=1).squeeze(1)
    return torch.argmax(scores, dim=-1)


def _lookup(sequence, n, ngram):
    """Prompt lookup: after the earliest earlier occurrence of the longest
    n-gram (ngram down to 1) that ends `sequence` (a list), up to n tokens."""
    for size in range(min(ngram, len(sequence) - 1), 0, -1):
        tail = sequence[-size:]
        for start in range(len(sequence) - size):
            if sequence[start:start + size] == tail:
                follow = sequence[start + size:start + size + n]
                if follow:
                    return follow
    return []


class _Assistant:
    """Assisted decoding's drafter: the assistant model on its own
    DynamicCache, fed what it lacks, greedy, cropped back to the tokens the
    target kept."""

    def __init__(self, model):
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.cache.activate_past_recording()  # sliding layers can then crop past the window
        self.seen = 0  # tokens in its cache

    def drafts(self, sequence, n):
        device = next(self.model.parameters()).device
        out = []
        feed = sequence[self.seen:]
        for _ in range(n):
            ids = torch.tensor([feed], device=device)
            positions = torch.arange(self.seen, self.seen + len(feed), device=device)
            logits = self.model(input_ids=ids, position_ids=positions.unsqueeze(0),
                                cache=self.cache, use_cache=True).logits
            self.seen += len(feed)
            feed = [int(logits[0, -1].argmax())]
            out.append(feed[0])
        return out

    def keep(self, length):
        if length < self.seen:
            self.cache.crop(length - self.seen)
            self.seen = length


def _verify_step(model, cache, rows, drafts):
    """One verification forward: each live row's newest token and its drafts
    at consecutive positions, padded to the cache's verify bucket; logits
    [b, q, vocab] (float32)."""
    b = len(rows)
    q = cache.verify_buckets.round_up(1 + max(len(d) for d in drafts))
    batch = cache.batch_buckets.round_up(b)
    ids = torch.zeros(batch, q, dtype=torch.long)
    positions = torch.full((batch, q), -1, dtype=torch.long)
    for r, (row, d) in enumerate(zip(rows, drafts)):
        if row["done"]:
            continue
        fed = [row["tokens"][-1]] + d
        ids[r, :len(fed)] = torch.tensor(fed)
        positions[r, :len(fed)] = torch.arange(row["length"] - 1, row["length"] - 1 + len(fed))
    return _forward(model, cache, ids, positions)[:b].float()


def _speculative_loop(model, cache, input_ids, lengths, options):
    """Greedy decoding with drafts: each step verifies every live row's drafts
    (prompt lookup over its own ids, or the assistant's) in one forward of a
    verify bucket, keeps the longest prefix greedy agrees with plus greedy's
    next token, and rolls the rejected drafts back (C++ rollback). Each row
    gets exactly its own greedy tokens."""
    b = input_ids.shape[0]
    cache.native.reset_rows(torch.arange(b))
    logits = _prefill(model, cache, input_ids, lengths)
    first = _choose(logits, input_ids.to(logits.device), options).tolist()
    eos = set() if options.eos is None else set(options.eos.tolist())
    rows = []
    for r in range(b):
        prompt = input_ids[r, input_ids.shape[1] - int(lengths[r]):].tolist()
        rows.append(dict(tokens=prompt + [first[r]], length=int(lengths[r]) + 1, new=1,
                         done=first[r] in eos or options.max_new_tokens == 1))
    assistant = _Assistant(options.assistant) if options.assistant is not None else None
    while not all(row["done"] for row in rows):
        drafts = []
        for row in rows:
            n = 0 if row["done"] else min(options.drafts, options.max_new_tokens - row["new"] - 1)
            if n <= 0:
                drafts.append([])
            elif assistant is not None:
                drafts.append(assistant.drafts(row["tokens"], n))
            else:
                drafts.append(_lookup(row["tokens"], n, options.ngram))
        logits = _verify_step(model, cache, rows, drafts)
        greedy = logits.argmax(-1).tolist()
        kept = []
        for r, row in enumerate(rows):
            if row["done"]:
                kept.append(int(cache.native.seq_lengths()[r]))
                continue
            accepted = 0
            while accepted < len(drafts[r]) and drafts[r][accepted] == greedy[r][accepted]:
                accepted += 1
            for token in drafts[r][:accepted] + [greedy[r][accepted]]:
                row["tokens"].append(token)
                row["new"] += 1
                if token in eos or row["new"] >= options.max_new_tokens:
                    row["done"] = True
                    break
            row["length"] = len(row["tokens"])
            kept.append(row["length"] - 1)  # the newest token is fed next step
        cache.native.rollback(kept)
        if assistant is not None:
            assistant.keep(rows[0]["length"] - 1)
    width = max(len(row["tokens"]) - int(lengths[r]) for r, row in enumerate(rows))
    out = torch.full((b, width), options.pad_token_id, dtype=torch.long)
    for r, row in enumerate(rows):
        new = row["tokens"][int(lengths[r]):]
        out[r, :len(new)] = torch.tensor(new)
    return torch.cat([input_ids, out.to(input_ids.device)], 1)


class _BeamScratch:
    """Beam search's reorder of the cache rows, allocation-free per step: one
    scratch buffer per buffer shape and dtype and one index buffer, made on
    first use and kept with the cache. Only the stored rows move (keys,
    values, and a quantized cache's scales): the beams of one prompt sit at
    the same positions, so their bookkeeping rows are equal and a reorder
    within a prompt's beams leaves it as it is."""

    def __init__(self, cache):
        if getattr(cache, "_beam_scratch", None) is None:
            first = cache.layers[0].keys
            buffers = {}
            for layer in cache.layers:
                for buffer in map(_movable, layer.buffers()):
                    key = (tuple(buffer.shape), buffer.dtype)
                    if key not in buffers:
                        buffers[key] = torch.empty_like(buffer)
            index = torch.empty(cache.max_batch_size, dtype=torch.long, device=first.device)
            cache._beam_scratch = (buffers, index)
        self.cache = cache
        self.buffers, self.index = cache._beam_scratch

    def reorder(self, beam_idx):
        n = beam_idx.numel()
        index = self.index[:n]
        index.copy_(beam_idx)
        for layer in self.cache.layers:
            for buffer in map(_movable, layer.buffers()):
                scratch = self.buffers[(tuple(buffer.shape), buffer.dtype)][:n]
                torch.index_select(buffer[:n], 0, index, out=scratch)
                buffer[:n].copy_(scratch)


def _movable(buffer):
    """float8 codes move as their uint8 bits (no float8 index_select on the CPU)."""
    return buffer.view(torch.uint8) if buffer.dtype == torch.float8_e4m3fn else buffer


def _beam_loop(model, cache, input_ids, lengths, options):
    """Beam search as transformers' _beam_search runs it (its own beam
    bookkeeping helpers), with every forward through the cache's buckets:
    the prompt's rows repeated num_beams times, prefilled once, then one
    decode step for every beam, the cache rows reordered to follow their
    parents (_BeamScratch)."""
    from transformers.generation.stopping_criteria import (
        EosTokenCriteria,
        MaxLengthCriteria,
        StoppingCriteriaList,
    )

    nb = options.num_beams
    b, width = input_ids.shape
    rows = b * nb
    ids = input_ids.repeat_interleave(nb, 0)
    lens = lengths.repeat_interleave(nb)
    cache.native.reset_rows(torch.arange(rows))
    scratch = _BeamScratch(cache)
    logits = _prefill(model, cache, ids, lens)
    device = logits.device
    max_length = width + options.max_new_tokens
    criteria = StoppingCriteriaList([MaxLengthCriteria(max_length)])
    if options.eos is not None:
        criteria.append(EosTokenCriteria(options.eos.to(device)))
    keep = max(2, 1 + (0 if options.eos is None else options.eos.numel())) * nb
    top_mask = torch.cat([torch.ones(nb, dtype=torch.bool),
                          torch.zeros(keep - nb, dtype=torch.bool)]).to(device)
    running = torch.full((b, nb, max_length), options.pad_token_id, dtype=torch.long,
                         device=device)
    running[:, :, :width] = ids.to(device).view(b, nb, width)
    sequences = running.clone()
    running_scores = torch.zeros((b, nb), device=device)
    running_scores[:, 1:] = -1e9
    beam_scores = torch.full((b, nb), -1e9, device=device)
    finished = torch.zeros((b, nb), dtype=torch.bool, device=device)
    heuristic = torch.ones((b, 1), dtype=torch.bool, device=device)
    running_idx = torch.full((b, nb, max_length - width), -1, dtype=torch.int32, device=device)
    beam_indices = running_idx.clone()
    cur = width
    while True:
        flat = running[:, :, :cur].reshape(rows, cur)
        log_probs = options.processors(flat, torch.nn.functional.log_softmax(logits, dim=-1))
        log_probs = (log_probs.view(b, nb, -1) + running_scores[:, :, None]).reshape(b, -1)
        topk_lp, topk_seq, topk_idx = model._get_top_k_continuations(
            accumulated_log_probs=log_probs, running_sequences=running,
            running_beam_indices=running_idx, cur_len=cur, decoder_prompt_len=width,
            do_sample=False, beams_to_keep=keep, num_beams=nb, batch_size=b)
        hits = criteria(topk_seq[:, :, :cur + 1].reshape(b * keep, -1), None).view(b, keep)
        running, running_scores, running_idx = model._get_running_beams_for_next_iteration(
            topk_log_probs=topk_lp, topk_running_sequences=topk_seq,
            topk_running_beam_indices=topk_idx, next_token_hits_stopping_criteria=hits,
            num_beams=nb)
        sequences, beam_scores, beam_indices, finished = model._update_finished_beams(
            sequences=sequences, topk_running_sequences=topk_seq, beam_scores=beam_scores,
            topk_log_probs=topk_lp, beam_indices=beam_indices,
            topk_running_beam_indices=topk_idx, is_early_stop_heuristic_unsatisfied=heuristic,
            is_sent_finished=finished, next_token_hits_stopping_criteria=hits,
            top_num_beam_mask=top_mask, num_beams=nb, cur_len=cur, decoder_prompt_len=width,
            length_penalty=options.length_penalty, early_stopping=options.early_stopping)
        scratch.reorder(running_idx[..., cur - width].reshape(rows))
        cur += 1
        heuristic = model._check_early_stop_heuristic(
            is_early_stop_heuristic_unsatisfied=heuristic, running_beam_scores=running_scores,
            beam_scores=beam_scores, is_sent_finished=finished, cur_len=cur,
            max_length=max_length, decoder_prompt_len=width,
            early_stopping=options.early_stopping, length_penalty=options.length_penalty)
        if not bool(model._beam_search_has_unfinished_sequences(heuristic, finished, hits,
                                                                options.early_stopping)):
            break
        tokens = running[:, :, cur - 1].reshape(rows)
        logits = _decode(model, cache, tokens, lens + (cur - 1 - width))
    best = sequences[:, 0]
    generated = int(((beam_indices[:, 0] + 1).bool()).sum(dim=1).max())
    return best[:, :width + generated].to(input_ids.device)


def _loop(model, cache, input_ids, lengths, options):
    if options.num_beams > 1:
        return _beam_loop(model, cache, input_ids, lengths, options)
    if options.drafts:
        return _speculative_loop(model, cache, input_ids, lengths, options)
    b = input_ids.shape[0]
    cache.native.reset_rows(torch.arange(b))
    logits = _prefill(model, cache, input_ids, lengths)
    sequences = input_ids.to(logits.device)
    unfinished = torch.ones(b, dtype=torch.bool, device=logits.device)
    eos = None if options.eos is None else options.eos.to(logits.device)
    for step in range(options.max_new_tokens):
        if step:
            logits = _decode(model, cache, sequences[:, -1], lengths + step - 1)
        token = _choose(logits, sequences, options)
        token = torch.where(unfinished, token, options.pad_token_id)
        sequences = torch.cat([sequences, token.unsqueeze(1)], dim=1)
        if eos is not None:
            unfinished &= ~torch.isin(token, eos)
            if not bool(unfinished.any()):
                break
    return sequences


def generate(model, cache, input_ids, attention_mask=None, **generate_kwargs):
    """Generates with `cache` (a StaticKVCache) around `model(...)`; returns
    input ids followed by the new ids, as model.generate does. Checks every
    argument before anything is written (Invariant [checked before written])."""
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids: expected [batch, length] but got {list(input_ids.shape)}")
    lengths = _prompt_lengths(input_ids, attention_mask)
    options = _options(model, input_ids.shape[1], generate_kwargs)
    _check(cache, input_ids, lengths, options)
    cache._managed = True
    try:
        with torch.no_grad():
            return _loop(model, cache, input_ids, lengths, options)
    finally:
        cache._managed = False
