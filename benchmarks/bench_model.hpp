#pragma once
// Shared by the benchmarks that run the reference decoder: model shapes,
// random-weight models, caches filled without a model pass, and Session, a
// persistent serving loop (one cache, one prefill and one decode GraphRunner
// kept across requests, as a server would hold them).
//
// Why not reference::generate(): it builds a fresh cache and fresh runners
// per call, so on CUDA every call would capture its graphs again. A server
// captures once per bucket for its lifetime; Session does that.

#include <statickv/statickv.hpp>

#include <statickv/reference/checkpoint.hpp>
#include <statickv/reference/model.hpp>

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

inline std::unique_ptr<reference::LlamaModel> random_model(const std::string& shape,
                                                           at::ScalarType dtype,
                                                           const at::Device& device,
                                                           uint64_t seed = 0) {
  reference::ModelConfig config = model_shape(shape);
  reference::Weights weights = reference::random_weights(config, seed, dtype, device);
  return std::make_unique<reference::LlamaModel>(std::move(config), std::move(weights));
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
inline void fill_cache(CacheBase& cache, int64_t rows, int64_t length, uint64_t seed = 0) {
  const CacheConfig& c = cache.config();
  const auto opts = at::TensorOptions().dtype(c.dtype).device(c.device);
  at::manual_seed(seed);
  for (int64_t begin = 0; begin < length; begin += c.chunk_limit()) {
    const int64_t q = std::min(c.chunk_limit(), length - begin);
    Step step = cache.prepare(at::arange(begin, begin + q, opts.dtype(at::kLong)), rows);
    for (int64_t layer = 0; layer < c.num_layers; ++layer) {
      const at::Tensor k = at::randn({rows, c.num_kv_heads, q, c.head_dim}, opts);
      const at::Tensor v = at::randn({rows, c.num_kv_heads, q, c.head_dim}, opts);
      cache.update(layer, k, v, step);
    }
  }
}

/// How a Session runs its forward passes.
enum class ServeMode {
  kEager,      ///< plain forward at the exact shape (attention over the exact length)
  kBucketed,   ///< GraphRunner, power-of-two buckets (CUDA graphs on a GPU)
  kPerLength,  ///< GraphRunner with a bucket for every length: one capture per new length
};

inline ServeMode parse_serve_mode(const std::string& name) {
  if (name == "eager") return ServeMode::kEager;
  if (name == "bucketed" || name == "graphs") return ServeMode::kBucketed;
  if (name == "per-length") return ServeMode::kPerLength;
  throw std::invalid_argument("mode: expected eager, bucketed or per-length but got " + name);
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

/// One request's result and timings.
struct Served {
  std::vector<int64_t> tokens;  ///< generated ids (greedy)
  double first_token_s = 0;     ///< prefill + first token on the host
  double decode_s = 0;          ///< the remaining tokens
  int64_t decode_steps = 0;
};

/// A persistent greedy server for one row at a time: its cache and runners
/// live as long as it does, so on CUDA each bucket is captured once.
class Session {
 public:
  struct Options {
    ServeMode mode = ServeMode::kBucketed;
    int64_t max_batch = 1;
    int64_t max_len = 1024;
    int64_t min_attend_bucket = 64;  ///< smallest decode attend bucket (bucketed)
    bool cuda_graphs = true;         ///< bucketed/per-length on CUDA: capture graphs
  };

  Session(const reference::LlamaModel& model, Options options)
      : model_(model), options_(options), device_(model.device()) {
    cache_ = std::make_unique<StaticCache>(model.cache_config(options.max_batch, options.max_len));
    backend_ = std::make_unique<reference::CacheBackend>(*cache_);
    if (options.mode == ServeMode::kEager) return;
    const std::vector<InputSpec> inputs = {{"ids", at::kLong, {}, 0},
                                           {"positions", at::kLong, {}, -1}};
    const GraphRunner::StepFn step = [this](const std::vector<at::Tensor>& in,
                                            const GraphKey& key) {
      return std::vector<at::Tensor>{model_.forward(in[0], in[1], *backend_, key.attend_len)};
    };
    const int64_t max_len = options.max_len;
    GraphRunner::Options ro;
    ro.device = device_;
    ro.use_graphs = options.cuda_graphs;
    ro.batch_buckets = ShapeBuckets::powers_of_two(options.max_batch);
    if (options.mode == ServeMode::kBucketed) {
      ro.query_buckets = ShapeBuckets::powers_of_two(max_len);
      ro.attend_buckets = ShapeBuckets::powers_of_two(max_len);
    } else {
      ro.query_buckets = ShapeBuckets::multiples_of(1, max_len);
      ro.attend_buckets = ShapeBuckets::multiples_of(1, max_len);
    }
    prefill_ = std::make_unique<GraphRunner>(inputs, step, ro);
    ro.query_buckets = ShapeBuckets::of({1});
    ro.attend_buckets = ShapeBuckets::powers_of_two(
        max_len, std::min(max_len, std::max<int64_t>(1, options.min_attend_bucket)));
    decode_ = std::make_unique<GraphRunner>(inputs, step, ro);
  }

  /// Logits [b, q, vocab] of one pass over ids/positions [b, q] (any device);
  /// attend_len: one past the highest position attended.
  at::Tensor prefill(const at::Tensor& ids, const at::Tensor& positions, int64_t attend_len) {
    return pass(prefill_.get(), ids, positions, attend_len);
  }
  at::Tensor decode(const at::Tensor& ids, const at::Tensor& positions, int64_t attend_len) {
    return pass(decode_.get(), ids, positions, attend_len);
  }

  /// Greedy generation for one prompt in row 0 (the row is emptied first).
  Served serve(const std::vector<int64_t>& prompt, int64_t new_tokens) {
    TORCH_CHECK(
        !prompt.empty() && static_cast<int64_t>(prompt.size()) + new_tokens <= options_.max_len,
        "prompt: expected 1..max_len - new_tokens tokens but got ", prompt.size());
    const auto host = at::TensorOptions().dtype(at::kLong);
    cache_->reset_rows(at::zeros({1}, host));
    const int64_t n = static_cast<int64_t>(prompt.size());
    Served out;
    auto start = Clock::now();
    const at::Tensor ids = at::tensor(prompt, host).view({1, n});
    const at::Tensor logits = prefill(ids, at::arange(n, host).view({1, n}), n);
    out.tokens.push_back(logits[0][n - 1].argmax().item<int64_t>());
    out.first_token_s = seconds_since(start, device_);
    start = Clock::now();
    for (int64_t t = 1; t < new_tokens; ++t) {
      const int64_t p = n + t - 1;
      const at::Tensor step =
          decode(at::full({1, 1}, out.tokens.back(), host), at::full({1, 1}, p, host), p + 1);
      out.tokens.push_back(step[0][0].argmax().item<int64_t>());
      ++out.decode_steps;
    }
    out.decode_s = seconds_since(start, device_);
    return out;
  }

  StaticCache& cache() { return *cache_; }
  reference::CacheBackend& backend() { return *backend_; }
  /// Runner statistics (empty in eager mode).
  RunnerStats prefill_stats() const { return prefill_ ? prefill_->stats() : RunnerStats{}; }
  RunnerStats decode_stats() const { return decode_ ? decode_->stats() : RunnerStats{}; }
  bool uses_graphs() const { return prefill_ && prefill_->uses_graphs(); }

 private:
  at::Tensor pass(GraphRunner* runner, const at::Tensor& ids, const at::Tensor& positions,
                  int64_t attend_len) {
    if (runner) return runner->run({ids.to(device_), positions.to(device_)}, attend_len)[0];
    return model_.forward(ids.to(device_), positions.to(device_), *backend_, attend_len);
  }

  const reference::LlamaModel& model_;
  Options options_;
  at::Device device_;
  std::unique_ptr<StaticCache> cache_;
  std::unique_ptr<reference::CacheBackend> backend_;
  std::unique_ptr<GraphRunner> prefill_, decode_;
};

/// Runner statistics as JSON (captures, replays, padded-token fraction).
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
