"""benchmarks/hf_compare.py's parts, one module each, behind its command line.

  common       what every part shares: the named shapes' transformers configs,
               the seeded checkpoints, the timing streamer, loading, summaries
  serve        --parts serve: statickv-serve against transformers' static cache
               (eager, then compiled on CUDA)
  new_lengths  the serve part's first request at new prompt lengths (CUDA)
  batches      what smollm2 and roofline share: one batch through transformers
               or statickv-demo, interleaved rounds, their table
  smollm2      --parts smollm2: the real model against transformers
  roofline     --parts roofline: decode tokens/s, compiled transformers vs
               statickv's plain and fused paths
  seeds        --parts seeds: the two seed scenarios through the Python package

The options and what each part measures: hf_compare.py's docstring.
"""
