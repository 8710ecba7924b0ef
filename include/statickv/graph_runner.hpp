#pragma once
// GraphRunner: capture a step once per bucket, replay it for every size.
//
// The runner owns, per query-length bucket Q, one input buffer per input,
// [largest batch bucket, Q, ...]; each key (batch bucket B, Q and optionally
// an attended-length bucket) steps on its batch-prefix views [B, Q, ...]
// (Note [step inputs on the device], docs/design.md). Per key it owns the
// step's static outputs and, on CUDA, one CUDA graph; all graphs share one
// memory pool and are captured largest first, so smaller captures reuse what
// the first one grew. run() pads its real inputs [b, q, ...] into the key's
// views (positions with -1: padded tokens and rows go to the cache's
// scratch slot), replays, and returns views [b, q, ...] of the static
// outputs, valid until the next call with the same key; run_in_place()
// steps on what the buffers already hold, written there on the device by
// whoever owns the next step's inputs. Outputs declared
// per row (Options::row_outputs) are [B, ...] instead and come back as
// [b, ...]: a prefill step that keeps only each row's last logits holds
// [B, vocab] per key, not [B, Q, vocab].
//
// Without CUDA (a CPU device, a build without STATICKV_HAS_CUDA, or
// use_graphs = false) the same class runs the step eagerly on the same
// padded buffers, so bucketing, padding and output recovery are one code
// path, tested in CI without a GPU.
//
// Requirement on the step: on all-padding inputs (what warm-up runs before a
// capture use) it must change nothing that matters; a cache step does
// exactly that, since padded positions only reach the scratch slot.
//
// A capture that fails (a host sync inside the step, say) is ended cleanly;
// the key falls back to eager runs and stats() reports the key and the
// reason. The runner stays usable.

#include <statickv/buckets.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace statickv {

/// The padded shape a step runs at. attend_len is -1 without attend buckets.
struct GraphKey {
  int64_t batch = 0;
  int64_t query_len = 0;
  int64_t attend_len = -1;
  bool operator<(const GraphKey& o) const {
    return std::tie(batch, query_len, attend_len) < std::tie(o.batch, o.query_len, o.attend_len);
  }
  bool operator==(const GraphKey& o) const {
    return batch == o.batch && query_len == o.query_len && attend_len == o.attend_len;
  }
};

/// One step input, [batch, q, trailing...], padded with pad_value.
struct InputSpec {
  std::string name;
  at::ScalarType dtype = at::kLong;
  std::vector<int64_t> trailing;
  at::Scalar pad_value = 0;
};

struct KeyStats {
  GraphKey key;
  bool captured = false;
  int64_t runs = 0;             ///< calls served by this key (replays or eager runs)
  double capture_seconds = 0;   ///< warm-up + capture
  int64_t real_tokens = 0;      ///< sum of b * q over calls
  int64_t padded_tokens = 0;    ///< sum of B * Q - b * q over calls
  std::string capture_failure;  ///< why a capture failed ("" = none)
  double padded_fraction() const {
    const int64_t total = real_tokens + padded_tokens;
    return total > 0 ? static_cast<double>(padded_tokens) / static_cast<double>(total) : 0.0;
  }
};

struct RunnerStats {
  int64_t captures = 0;
  int64_t failed_captures = 0;
  int64_t replays = 0;
  int64_t eager_runs = 0;
  double capture_seconds = 0;
  std::vector<KeyStats> keys;  ///< by key order
};

namespace detail {

/// A captured device graph: the CUDA implementation lives in src/ so that
/// public headers need no CUDA headers.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual void replay() = 0;
};

/// A memory pool shared by a runner's graphs (opaque outside src/).
struct GraphPool {
  uint64_t first = 0;
  uint64_t second = 0;
};

#ifdef STATICKV_HAS_CUDA
/// A fresh pool for the current CUDA device.
GraphPool new_graph_pool();
/// Runs `warmup` eagerly `warmup_runs` times, then captures `body` once, on a
/// side stream of `device`, allocating from `pool`. Throws c10::Error, with
/// the capture ended and the stream usable again, if capture fails.
std::unique_ptr<DeviceGraph> capture_cuda_graph(const at::Device& device, GraphPool pool,
                                                int warmup_runs, const std::function<void()>& body);

/// Nodes of one captured step, by kind (cudaGraphGetNodes).
struct GraphNodeCounts {
  int64_t kernels = 0;  ///< kernel launches
  int64_t copies = 0;   ///< memcpy nodes
  int64_t sets = 0;     ///< memset nodes
  int64_t total = 0;    ///< every node
};
/// Runs `body` eagerly `warmup_runs` times, captures it once on a side
/// stream of `device` and counts the graph's nodes (the graph is dropped):
/// how many kernels a step launches. For benchmarks and tests.
GraphNodeCounts count_graph_nodes(const at::Device& device, int warmup_runs,
                                  const std::function<void()>& body);

/// One kernel node of a captured step: the kernel's name ("?" where the
/// runtime cannot name it: a kernel a library launched through the driver
/// API) and its launch shape.
struct GraphKernel {
  std::string name;
  int64_t grid[3] = {1, 1, 1};
  int64_t block[3] = {1, 1, 1};
  int64_t shared_bytes = 0;
};
/// count_graph_nodes()'s capture, listed: every kernel node of one captured
/// step in the graph's node order. With `dot_path`, the graph's own debug
/// dump (cudaGraphDebugDotPrint, verbose: every node's parameters) is
/// written there too. For the benchmarks' kernel inventory.
std::vector<GraphKernel> graph_kernels(const at::Device& device, int warmup_runs,
                                       const std::function<void()>& body,
                                       const std::string& dot_path = "");

/// Seconds the work `fn` enqueues on `device`'s current stream takes, from
/// a CUDA event recorded before it to one recorded after it (the stream is
/// synchronized first and after): device time, not the host's.
double stream_seconds(const at::Device& device, const std::function<void()>& fn);
#endif

}  // namespace detail

class GraphRunner {
 public:
  /// Runs one step at the key's padded shape on the static inputs and
  /// returns its outputs, each [key.batch, key.query_len, ...], or
  /// [key.batch, ...] for the outputs listed in Options::row_outputs.
  using StepFn =
      std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&, const GraphKey&)>;

  struct Options {
    ShapeBuckets batch_buckets = ShapeBuckets::of({1});
    ShapeBuckets query_buckets = ShapeBuckets::of({1});
    std::optional<ShapeBuckets> attend_buckets;
    at::Device device = at::Device(at::kCPU);
    bool use_graphs = true;  ///< CUDA graphs where available; false = always eager
    int warmup_runs = 2;
    /// Indices of step outputs that are per row, [B, ...], not per token.
    std::vector<size_t> row_outputs;
  };

  GraphRunner(std::vector<InputSpec> inputs, StepFn step, Options options)
      : specs_(std::move(inputs)), step_(std::move(step)), options_(std::move(options)) {
    TORCH_CHECK(!specs_.empty(), "inputs: expected at least one InputSpec but got none");
    TORCH_CHECK(step_ != nullptr, "step: expected a callable step function but got an empty one");
    TORCH_CHECK(options_.warmup_runs >= 0, "Options.warmup_runs: expected >= 0 but got ",
                options_.warmup_runs);
    for (size_t i = 0; i < options_.row_outputs.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        TORCH_CHECK(options_.row_outputs[i] != options_.row_outputs[j], "Options.row_outputs[", i,
                    "]: expected distinct output indices but got ", options_.row_outputs[i],
                    " twice");
      }
    }
    for (size_t i = 0; i < specs_.size(); ++i) {
      for (int64_t size : specs_[i].trailing) {
        TORCH_CHECK(size >= 0, "inputs[", i, "] (", specs_[i].name,
                    ").trailing: expected sizes >= 0 but got ",
                    at::IntArrayRef(specs_[i].trailing));
      }
    }
    graphs_ = captures(options_.use_graphs, options_.device);
#ifdef STATICKV_HAS_CUDA
    if (graphs_) pool_ = detail::new_graph_pool();
#endif
  }

  // The runner owns graphs that point into its static buffers, and steps
  // that usually refer to it: copying or moving it would leave them dangling.
  GraphRunner(const GraphRunner&) = delete;
  GraphRunner& operator=(const GraphRunner&) = delete;
  GraphRunner(GraphRunner&&) = delete;
  GraphRunner& operator=(GraphRunner&&) = delete;

  /// True when calls replay CUDA graphs (else the step runs eagerly).
  bool uses_graphs() const { return graphs_; }
  /// Whether a runner with these options replays CUDA graphs: use_graphs,
  /// a CUDA device and a build with CUDA (STATICKV_HAS_CUDA).
  static bool captures(bool use_graphs, const at::Device& device) {
#ifdef STATICKV_HAS_CUDA
    return use_graphs && device.is_cuda();
#else
    (void)use_graphs, (void)device;
    return false;
#endif
  }
  /// How many inputs run() takes (the InputSpecs given).
  size_t input_count() const { return specs_.size(); }

  /// The key that serves `batch` rows of `query_len` tokens attending up to
  /// `attend_len` positions (ignored without attend buckets).
  GraphKey key_for(int64_t batch, int64_t query_len, int64_t attend_len = -1) const {
    GraphKey key;
    key.batch = options_.batch_buckets.round_up(batch, "batch (inputs' size(0))");
    key.query_len = options_.query_buckets.round_up(query_len, "q (inputs' size(1))");
    if (options_.attend_buckets) {
      TORCH_CHECK(attend_len >= 1, "attend_len: expected >= 1 with attend buckets but got ",
                  attend_len);
      key.attend_len = options_.attend_buckets->round_up(attend_len, "attend_len");
    }
    return key;
  }

  /// Pads `inputs` (each [b, q, ...]) into the key's static buffers, runs
  /// the step (replay or eager) and returns views [b, q, ...] of its outputs
  /// ([b, ...] for row outputs).
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs, int64_t attend_len = -1) {
    TORCH_CHECK(inputs.size() == specs_.size(), "inputs: expected ", specs_.size(),
                " tensors but got ", inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) check_input(i, inputs[i], inputs[0]);
    const int64_t b = inputs[0].size(0);
    const int64_t q = inputs[0].size(1);
    Entry& entry = ready_entry(key_for(b, q, attend_len));
    for (size_t i = 0; i < inputs.size(); ++i) {
      pad_into(entry.inputs[i], inputs[i], specs_[i].pad_value);
    }
    return step_entry(entry, b, q);
  }

  /// The input buffers of the query bucket that serves `query_len`, each
  /// [largest batch bucket, Q, ...]: every key with that Q steps on their
  /// batch-prefix views. Allocated on first use (filled with the pad
  /// values), they never move (Invariant [stable addresses]), so a step or
  /// a copy on the device may write the next step's inputs into them.
  const std::vector<at::Tensor>& input_buffers(int64_t query_len) {
    const int64_t bucket = options_.query_buckets.round_up(query_len, "query_len");
    auto it = buffers_.find(bucket);
    if (it != buffers_.end()) return it->second;
    std::vector<at::Tensor> buffers;
    for (const InputSpec& spec : specs_) {
      std::vector<int64_t> shape = {options_.batch_buckets.max(), bucket};
      shape.insert(shape.end(), spec.trailing.begin(), spec.trailing.end());
      buffers.push_back(at::full(shape, spec.pad_value,
                                 at::TensorOptions().dtype(spec.dtype).device(options_.device)));
    }
    return buffers_.emplace(bucket, std::move(buffers)).first->second;
  }

  /// Runs the step of `batch` rows of `query_len` tokens on the inputs the
  /// bucket's buffers (input_buffers(query_len)) already hold: rows [0,
  /// batch) as they stand, padding past query_len included, and rows
  /// [batch, B) of the key's batch bucket filled with the pad values here,
  /// on the device. Nothing is copied from the host and nothing is read
  /// back. Returns what run() returns.
  std::vector<at::Tensor> run_in_place(int64_t batch, int64_t query_len, int64_t attend_len = -1) {
    (void)options_.batch_buckets.round_up(batch, "batch");  // refused here by their names
    (void)options_.query_buckets.round_up(query_len, "query_len");
    Entry& entry = ready_entry(key_for(batch, query_len, attend_len));
    const int64_t padded = entry.stats.key.batch - batch;
    for (size_t i = 0; i < specs_.size() && padded > 0; ++i) {
      entry.inputs[i].narrow(0, batch, padded).fill_(specs_[i].pad_value);
    }
    return step_entry(entry, batch, query_len);
  }

  /// Captures every key now (largest first), instead of on first use.
  /// Without graphs this only allocates the keys' static buffers.
  void capture_all() {
    std::vector<int64_t> attends = {-1};
    if (options_.attend_buckets) attends = options_.attend_buckets->capture_order();
    for (int64_t batch : options_.batch_buckets.capture_order()) {
      for (int64_t q : options_.query_buckets.capture_order()) {
        for (int64_t a : attends) {
          Entry& entry = entry_for(GraphKey{batch, q, a});
          if (graphs_ && !entry.graph && entry.stats.capture_failure.empty()) capture(entry);
        }
      }
    }
  }

  RunnerStats stats() const {
    RunnerStats s = stats_;
    for (const auto& [key, entry] : entries_) s.keys.push_back(entry.stats);
    return s;
  }

  /// The static input buffers of a key (for tests: their addresses never change).
  const std::vector<at::Tensor>& static_inputs(const GraphKey& key) const {
    auto it = entries_.find(key);
    TORCH_CHECK(it != entries_.end(), "key: expected a key already run or captured but got [",
                key.batch, ", ", key.query_len, ", ", key.attend_len, "]");
    return it->second.inputs;
  }

 private:
  struct Entry {
    std::vector<at::Tensor> inputs;   // [B, Q, ...] each: views of buffers_[Q]
    std::vector<at::Tensor> outputs;  // [B, Q, ...] each
    std::unique_ptr<detail::DeviceGraph> graph;
    KeyStats stats;
  };

  void check_input(size_t i, const at::Tensor& t, const at::Tensor& first) const {
    const InputSpec& spec = specs_[i];
    const std::string name = "inputs[" + std::to_string(i) + "] (" + spec.name + ")";
    detail::check_defined(name.c_str(), t);
    detail::check_dtype(name.c_str(), t, spec.dtype);
    detail::check_device(name.c_str(), t, options_.device);
    TORCH_CHECK(t.dim() == 2 + static_cast<int64_t>(spec.trailing.size()) &&
                    t.sizes().slice(2) == at::IntArrayRef(spec.trailing),
                name, ": expected shape [batch, q, ", at::IntArrayRef(spec.trailing), "] but got ",
                t.sizes());
    TORCH_CHECK(t.size(0) == first.size(0) && t.size(1) == first.size(1), name,
                ": expected batch and q ", first.sizes().slice(0, 2), " like inputs[0] but got ",
                t.sizes().slice(0, 2));
  }

  Entry& entry_for(const GraphKey& key) {
    auto it = entries_.find(key);
    if (it != entries_.end()) return it->second;
    Entry entry;
    entry.stats.key = key;
    for (const at::Tensor& buffer : input_buffers(key.query_len)) {
      entry.inputs.push_back(buffer.narrow(0, 0, key.batch));
    }
    return entries_.emplace(key, std::move(entry)).first->second;
  }

  /// The key's entry, captured first where graphs are on.
  Entry& ready_entry(const GraphKey& key) {
    Entry& entry = entry_for(key);
    if (graphs_ && !entry.graph && entry.stats.capture_failure.empty()) capture(entry);
    return entry;
  }

  /// Replays or runs the entry on its inputs as they stand, counts the
  /// call, and returns the outputs' views of `b` rows and `q` tokens.
  std::vector<at::Tensor> step_entry(Entry& entry, int64_t b, int64_t q) {
    const GraphKey& key = entry.stats.key;
    if (entry.graph) {
      entry.graph->replay();
      ++stats_.replays;
    } else {
      entry.outputs = checked_outputs(step_(entry.inputs, key), key);
      ++stats_.eager_runs;
    }
    ++entry.stats.runs;
    entry.stats.real_tokens += b * q;
    entry.stats.padded_tokens += key.batch * key.query_len - b * q;
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < entry.outputs.size(); ++i) {
      out.push_back(is_row_output(i) ? entry.outputs[i].narrow(0, 0, b)
                                     : unpad(entry.outputs[i], b, q));
    }
    return out;
  }

  bool is_row_output(size_t i) const {
    return std::find(options_.row_outputs.begin(), options_.row_outputs.end(), i) !=
           options_.row_outputs.end();
  }

  std::vector<at::Tensor> checked_outputs(std::vector<at::Tensor> outputs,
                                          const GraphKey& key) const {
    for (size_t i : options_.row_outputs) {
      TORCH_CHECK(i < outputs.size(), "Options.row_outputs: expected indices below the step's ",
                  outputs.size(), " outputs but got ", i);
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      const at::Tensor& o = outputs[i];
      if (is_row_output(i)) {
        TORCH_CHECK(o.defined() && o.dim() >= 1 && o.size(0) == key.batch, "step output ", i,
                    ": expected shape [", key.batch,
                    ", ...] (a row output: the key's padded batch) but got ", detail::shape_of(o));
      } else {
        TORCH_CHECK(
            o.defined() && o.dim() >= 2 && o.size(0) == key.batch && o.size(1) == key.query_len,
            "step output ", i, ": expected shape [", key.batch, ", ", key.query_len,
            ", ...] (the key's padded batch and q) but got ", detail::shape_of(o));
      }
    }
    return outputs;
  }

  void capture(Entry& entry) {
#ifdef STATICKV_HAS_CUDA
    const GraphKey key = entry.stats.key;
    // Warm-up and capture run on padding; the shared buffers' rows get back
    // what they held, since run_in_place steps on them as they stand.
    std::vector<at::Tensor> held;
    for (size_t i = 0; i < specs_.size(); ++i) {
      held.push_back(entry.inputs[i].clone());
      entry.inputs[i].fill_(specs_[i].pad_value);
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      std::vector<at::Tensor> outputs;
      entry.graph = detail::capture_cuda_graph(options_.device, pool_, options_.warmup_runs, [&] {
        outputs = checked_outputs(step_(entry.inputs, key), key);
      });
      entry.outputs = std::move(outputs);
      entry.stats.captured = true;
      ++stats_.captures;
    } catch (const c10::Error& e) {
      entry.graph.reset();
      entry.stats.capture_failure = e.what_without_backtrace();
      ++stats_.failed_captures;
    }
    for (size_t i = 0; i < specs_.size(); ++i) entry.inputs[i].copy_(held[i]);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    entry.stats.capture_seconds += took;
    stats_.capture_seconds += took;
#else
    (void)entry;
#endif
  }

  std::vector<InputSpec> specs_;
  StepFn step_;
  Options options_;
  bool graphs_ = false;
  detail::GraphPool pool_;
  std::map<int64_t, std::vector<at::Tensor>> buffers_;  // by query bucket
  std::map<GraphKey, Entry> entries_;
  RunnerStats stats_;
};

}  // namespace statickv
