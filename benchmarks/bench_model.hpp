#pragma once
// Shared by the benchmarks that run the reference decoder: model shapes,
// random-weight models, caches filled without a model pass, and the serving
// modes the benchmarks compare, as options of reference::Generator (a
// session that keeps its cache and runners across requests, as a server
// holds them, so each bucket is captured once).

#include <statickv/statickv.hpp>

#include <statickv/engine/generator.hpp>
#include <statickv/model/checkpoint.hpp>
#include <statickv/model/model.hpp>

#include "bench_util.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace statickv::bench {

/// Named shapes: reference::named_config's, plus "small", a CPU-sized
/// Llama (4 layers, hidden 512, 8 q / 2 kv heads x 64, vocab 8192) whose
/// prefill cost is dominated by its matrix products, unlike "tiny".
inline reference::ModelConfig model_shape(const std::string& name) {
  if (name == "small") {
    reference::ModelConfig c = reference::named_config("tiny");
    c.vocab_size = 8192;
    c.hidden_size = 512;
    c.intermediate_size = 1536;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 2;
    c.head_dim = 64;
    c.max_position_embeddings = 8192;
    c.validate();
    return c;
  }
  return reference::named_config(name);
}

/// The shapes the model benchmarks can serve: every name model_shape()
/// knows whose layers all attend in full (they serve a StaticCache).
inline std::vector<std::string> full_attention_shapes() {
  std::vector<std::string> names;
  for (const std::string& name : reference::named_config_names()) {
    if (!model_shape(name).has_sliding()) names.push_back(name);
  }
  names.push_back("small");
  return names;
}

/// --shape S: one of full_attention_shapes().
inline void add_shape_flag(Flags& flags, std::string* shape, const std::string& help) {
  flags.add_choice("--shape S", shape, full_attention_shapes(), help);
}

inline std::unique_ptr<reference::LlamaModel> random_model(const std::string& shape,
                                                           at::ScalarType dtype,
                                                           const at::Device& device,
                                                           uint64_t seed = 0) {
  reference::ModelConfig config = model_shape(shape);
  reference::Weights weights = reference::random_weights(config, seed, dtype, device);
  return std::make_unique<reference::LlamaModel>(std::move(config), std::move(weights));
}

/// A random-weight model drawn on `device` itself: on a GPU an 8B shape
/// takes seconds instead of the CPU draw's minute (reference::random_weights
/// draws on the CPU so a seed gives the same weights everywhere; timing
/// benchmarks need no such thing).
inline std::unique_ptr<reference::LlamaModel> device_random_model(reference::ModelConfig config,
                                                                  at::ScalarType dtype,
                                                                  const at::Device& device,
                                                                  uint64_t seed = 0) {
  at::manual_seed(seed);
  const auto opts = at::TensorOptions().dtype(dtype).device(device);
  reference::Weights weights;
  for (const auto& [name, shape_of] : reference::expected_parameters(config)) {
    const bool is_norm = shape_of.size() == 1 && name.size() >= 7 &&
                         name.compare(name.size() - 7, 7, ".weight") == 0;
    weights[name] = is_norm ? at::ones(shape_of, opts) : at::randn(shape_of, opts).mul_(0.02);
  }
  return std::make_unique<reference::LlamaModel>(std::move(config), std::move(weights));
}

inline std::unique_ptr<reference::LlamaModel> device_random_model(const std::string& shape,
                                                                  at::ScalarType dtype,
                                                                  const at::Device& device,
                                                                  uint64_t seed = 0) {
  return device_random_model(model_shape(shape), dtype, device, seed);
}

/// Bytes of every parameter a decode step reads once: all weights, except
/// that the embedding table is only gathered (b rows) unless it is tied to
/// the LM head, which reads it whole.
inline int64_t weight_bytes_per_step(const reference::ModelConfig& c, at::ScalarType dtype,
                                     int64_t batch) {
  int64_t params = 0;
  for (const auto& [name, shape] : reference::expected_parameters(c)) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    if (name == "model.embed_tokens.weight") {
      n = c.tie_word_embeddings ? n + batch * c.hidden_size : batch * c.hidden_size;
    }
    params += n;
  }
  return params * static_cast<int64_t>(c10::elementSize(dtype));
}

/// Writes random keys/values for positions [0, length) into rows [0, rows)
/// of every layer, in chunks of at most the cache's max_chunk (no model pass:
/// decode benchmarks only need a cache that holds `length` tokens).
inline void fill_cache(Cache& cache, int64_t rows, int64_t length, uint64_t seed = 0) {
  const CacheConfig& c = cache.config();
  const auto opts = at::TensorOptions().dtype(c.dtype).device(c.device);
  at::manual_seed(seed);
  for (int64_t begin = 0; begin < length; begin += c.effective_max_chunk()) {
    const int64_t q = std::min(c.effective_max_chunk(), length - begin);
    StepPlan step = cache.prepare(at::arange(begin, begin + q, opts.dtype(at::kLong)), rows);
    for (int64_t layer = 0; layer < c.num_layers; ++layer) {
      const at::Tensor k = at::randn({rows, c.num_kv_heads, q, c.head_dim}, opts);
      const at::Tensor v = at::randn({rows, c.num_kv_heads, q, c.head_dim}, opts);
      cache.update(layer, k, v, step);
    }
  }
}

/// How a serving session runs its forward passes.
enum class ServeMode {
  kEager,      ///< plain forward at the exact shape (attention over the exact length)
  kBucketed,   ///< GraphRunner, power-of-two buckets (CUDA graphs on a GPU)
  kPerLength,  ///< GraphRunner with a bucket for every length: one capture per new length
};

inline ServeMode parse_serve_mode(const std::string& name) {
  if (name == "eager") return ServeMode::kEager;
  if (name == "bucketed" || name == "graphs") return ServeMode::kBucketed;
  if (name == "per-length") return ServeMode::kPerLength;
  throw FlagError("--mode: expected eager, bucketed or per-length but got '" + name + "'");
}

inline const char* to_string(ServeMode mode) {
  switch (mode) {
    case ServeMode::kEager:
      return "eager";
    case ServeMode::kBucketed:
      return "bucketed";
    case ServeMode::kPerLength:
      return "per-length";
  }
  return "?";
}

/// Greedy Generator options for `mode` over a static cache of max_len
/// positions: every requested token is generated (no EOS stop), and the
/// prefill is one pass (no chunking). Per-length gives every prompt length
/// and every attended length its own key (decode too): no bucketing at all.
inline reference::GenerateOptions serve_options(ServeMode mode, int64_t max_len) {
  reference::GenerateOptions options;
  options.cache = reference::CacheKind::kStatic;
  options.stop_at_eos = false;
  options.bucketed = mode != ServeMode::kEager;
  if (mode == ServeMode::kPerLength) {
    options.prompt_buckets = ShapeBuckets::multiples_of(1, max_len);
    options.attend_buckets = ShapeBuckets::multiples_of(1, max_len);
  }
  return options;
}

/// Runner statistics as JSON (captures, replays, padded-token fraction).
/// A GraphRunner over one decode step of `model` through `backend`: inputs
/// ids and positions [B, 1], the given batch buckets, one attended length.
/// Both must outlive the runner.
inline std::unique_ptr<GraphRunner> decode_step_runner(const reference::LlamaModel& model,
                                                       reference::CacheBackend& backend,
                                                       const at::Device& device,
                                                       ShapeBuckets batch_buckets, int64_t attend) {
  GraphRunner::Options ro;
  ro.device = device;
  ro.batch_buckets = std::move(batch_buckets);
  ro.attend_buckets = ShapeBuckets::of({attend});
  const reference::LlamaModel* m = &model;
  reference::CacheBackend* b = &backend;
  return std::make_unique<GraphRunner>(
      std::vector<InputSpec>{{"ids", at::kLong, {}, 0}, {"positions", at::kLong, {}, -1}},
      [m, b](const std::vector<at::Tensor>& in, const GraphKey& key) {
        return std::vector<at::Tensor>{m->forward(in[0], in[1], *b, key.attend_len)};
      },
      ro);
}

inline Json to_json(const RunnerStats& s) {
  int64_t real = 0, padded = 0;
  for (const KeyStats& k : s.keys) {
    real += k.real_tokens;
    padded += k.padded_tokens;
  }
  return Json::object(
      {{"keys", s.keys.size()},
       {"captures", s.captures},
       {"failed_captures", s.failed_captures},
       {"replays", s.replays},
       {"eager_runs", s.eager_runs},
       {"capture_s", s.capture_seconds},
       {"real_tokens", real},
       {"padded_tokens", padded},
       {"padded_fraction", real + padded > 0
                               ? static_cast<double>(padded) / static_cast<double>(real + padded)
                               : 0.0}});
}

}  // namespace statickv::bench
