// Decode cost against context length: one decode step of an attention stack
// (cache write + attention for every layer of a model shape) at context
// lengths from 128 to max_len, for
//   ideal     preallocated contiguous buffers, a slice write, and attention
//             over exactly the valid tokens (no mask): the exact-length ideal
//   statickv  StaticCache with attend_len = the real length, sdpa with the
//             step's additive mask (what the reference decoder runs)
//   hf-static a static cache attending all max_len slots, as Hugging Face's
//             StaticCache does (statickv with attend_len = max_len)
//   dynamic   the DynamicCache baseline: torch::cat of the past and the new
//             token every step, then attention over exactly the valid tokens
// each printed as a ratio to the ideal (median of paired per-round ratios).
// Target: statickv <= 1.15x the ideal at every length.
//
// Two diagnostic variants split statickv's overhead where it shows (short
// contexts on a CPU, where every op's fixed cost counts):
//   ideal+mask   the ideal with a bool mask (all true): the cost of sdpa's
//                per-call bool-to-float mask conversion alone
//   sk-bool      statickv passing the step's bool mask to every layer's
//                sdpa instead of the additive one
// and the cache's own entry point, Cache::attend (Note [attention paths]):
//   attend       attend_len = the real length; on CUDA in fp16/bf16 the
//                mask-free varlen path (each row reads its own keys), else
//                the masked path
//   attend-max   the same with attend_len = max_len: the varlen path's cost
//                should follow the row's length, not the view's
// A ragged variant then decodes 16 rows at once whose lengths spread over
// 128 .. max_len (geometrically): ideal (per row, sdpa over exactly its
// keys), masked (sdpa with the additive mask, attend_len = the longest row)
// and attend (attend_len = max_len). The JSON summary: decode_vs_ideal_max
// (attend's worst median ratio), decode_vs_ideal_max_upto_4096,
// ragged_vs_ideal, and kernels_per_decode_step (CUDA graph kernel nodes of
// one captured step with --graphs on CUDA, else ATen ops per eager step).
// All variants run under c10::InferenceMode, as inference code should.
//
// With --graphs on CUDA, ideal, statickv and hf-static steps are captured
// once per length (GraphRunner) and replayed; dynamic stays eager (its
// shapes and addresses change every step).
//
//   statickv_bench_context [--device D] [--max-len N] [--contexts 128,256,...] ...

#include <statickv/apps/storage_flags.hpp>
#include <statickv/statickv.hpp>

#include "bench_util.hpp"

#include <ATen/record_function.h>
#include <fmt/format.h>

#ifdef STATICKV_HAS_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

using namespace statickv;
using namespace statickv::bench;

namespace {

struct Options {
  std::string device = "auto", dtype, contexts, json, kv_dtype;
  StackShape stack;  // Llama-3.2-1B geometry
  int64_t max_len = 4096;
  int rounds = 20, calls = 4, threads = 0;
  bool graphs = false;
};

// A step that takes the new token's position [1] (device int64) and returns
// the last layer's attention output [1, heads, 1, head_dim].
using StepFn = std::function<at::Tensor(const at::Tensor&)>;

int64_t& op_count() {
  static thread_local int64_t count = 0;
  return count;
}

// ATen ops one call of `step` dispatches (RecordFunction, the profiler's hook).
int64_t aten_ops(const std::function<void()>& step) {
  op_count() = 0;
  const at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(
          [](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> {
            ++op_count();
            return nullptr;
          })
          .needsInputs(false)
          .scopes({at::RecordScope::FUNCTION}));
  step();
  at::removeCallback(handle);
  return op_count();
}

// Kernel nodes of one captured call of `step` on CUDA (cudaGraphGetNodes),
// or ATen ops of one eager call elsewhere.
int64_t kernels_per_step(const std::function<void()>& step, const at::Device& device, bool graphs) {
#ifdef STATICKV_HAS_CUDA
  if (graphs && device.is_cuda()) {
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
    c10::cuda::CUDAStreamGuard guard(side);
    step();  // warm-up outside the capture
    side.synchronize();
    at::cuda::CUDAGraph graph(/*keep_graph=*/true);
    graph.capture_begin();
    step();
    graph.capture_end();
    size_t count = 0;
    cudaGraphGetNodes(graph.raw_cuda_graph(), nullptr, &count);
    std::vector<cudaGraphNode_t> nodes(count);
    cudaGraphGetNodes(graph.raw_cuda_graph(), nodes.data(), &count);
    int64_t kernels = 0;
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type;
      cudaGraphNodeGetType(node, &type);
      kernels += type == cudaGraphNodeTypeKernel ? 1 : 0;
    }
    return kernels;
  }
#endif
  (void)device;
  (void)graphs;
  return aten_ops(step);
}

// Wraps a step in a GraphRunner (captured once, replayed) when `graphs`,
// else runs it eagerly; `pos` is the step's position input.
Variant make_variant(const std::string& name, const StepFn& fn, const at::Tensor& pos, int64_t pad,
                     const at::Device& device, bool graphs,
                     std::vector<std::unique_ptr<GraphRunner>>& runners) {
  if (!graphs) return {name, [fn, pos] { fn(pos); }};
  GraphRunner::Options ro;
  ro.device = device;
  ro.batch_buckets = ShapeBuckets::of({pos.size(0)});
  ro.query_buckets = ShapeBuckets::of({1});
  auto runner = std::make_unique<GraphRunner>(
      // Padding (what capture warm-ups run on) is the step's own position:
      // the ideal steps' index_copy_ has no scratch slot.
      std::vector<InputSpec>{{"position", at::kLong, {}, pad}},
      [fn](const std::vector<at::Tensor>& in, const GraphKey&) {
        return std::vector<at::Tensor>{fn(in[0]).transpose(1, 2)};
      },
      ro);
  GraphRunner* r = runner.get();
  runners.push_back(std::move(runner));
  return {name, [r, pos] { r->run({pos}); }};
}

struct RaggedResult {
  Stats masked, attend;
  double ideal_ms = 0;
  std::vector<int64_t> lengths;
};

// 16 rows decoding at once, lengths spread geometrically over 128..max_len.
RaggedResult measure_ragged(const Options& o, const at::Device& device, at::ScalarType dtype,
                            bool graphs) {
  const auto opts = at::TensorOptions().dtype(dtype).device(device);
  const int64_t rows = 16, L = o.stack.layers, H = o.stack.kv_heads, D = o.stack.head_dim;
  const int64_t lo = std::min<int64_t>(128, o.max_len / 2), hi = o.max_len - 1;
  RaggedResult result;
  std::vector<int64_t> last;
  for (int64_t r = 0; r < rows; ++r) {
    const double f = static_cast<double>(r) / (rows - 1);
    result.lengths.push_back(
        std::max<int64_t>(2, std::llround(lo * std::pow(static_cast<double>(hi) / lo, f))));
    last.push_back(result.lengths.back() - 1);
  }
  CacheConfig config;
  config.num_layers = L;
  config.num_kv_heads = H;
  config.head_dim = D;
  config.max_batch = rows;
  config.max_len = o.max_len;
  config.dtype = dtype;
  config.device = device;
  StaticCache cache(config);
  const at::Tensor arange = at::arange(hi, opts.dtype(at::kLong));
  const at::Tensor len_t = at::tensor(result.lengths, at::kLong).to(device).view({rows, 1});
  {
    StepPlan fill = cache.prepare(at::where(arange.view({1, hi}).lt(len_t), arange, -1), rows);
    for (int64_t l = 0; l < L; ++l) {
      const at::Tensor kv = at::randn({rows, H, hi, D}, opts);
      cache.update(l, kv, kv, fill);
    }
  }
  const at::Tensor pos = len_t.sub(1);  // [16, 1]: each row rewrites its newest token
  const at::Tensor q = at::randn({rows, o.stack.heads, 1, D}, opts);
  const at::Tensor k = at::randn({rows, H, 1, D}, opts);
  std::vector<at::Tensor> ideal_k;  // per layer and row: contiguous [1, H, len, D]
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t r = 0; r < rows; ++r) {
      ideal_k.push_back(cache.keys(l).narrow(0, r, 1).narrow(2, 0, result.lengths[r]).clone());
    }
  }
  const at::Tensor ideal_out = at::empty({rows, o.stack.heads, 1, D}, opts);
  const StepFn ideal = [&](const at::Tensor&) {
    for (int64_t l = 0; l < L; ++l) {
      for (int64_t r = 0; r < rows; ++r) {
        const at::Tensor& kk = ideal_k[static_cast<size_t>(l * rows + r)];
        kk.narrow(2, last[r], 1).copy_(k.narrow(0, r, 1));
        const at::Tensor out = at::scaled_dot_product_attention(
            q.narrow(0, r, 1), kk, kk, {}, 0.0, false, std::nullopt, /*enable_gqa=*/true);
        if (l == L - 1) ideal_out.narrow(0, r, 1).copy_(out);  // the step's [16, ...] output
      }
    }
    return ideal_out;
  };
  const int64_t longest = result.lengths.back();
  auto cached = [&](int64_t attend, AttentionPath path) -> StepFn {
    return [&, attend, path](const at::Tensor& p) {
      StepPlan step = cache.prepare(p, rows, attend);
      at::Tensor out;
      for (int64_t l = 0; l < L; ++l)
        out = cache.attend(l, q, cache.update(l, k, k, step), step, path);
      return out;
    };
  };
  std::vector<std::unique_ptr<GraphRunner>> runners;
  const int64_t pad = -1;  // capture warm-ups: padding rows write only the scratch slot
  const std::vector<Variant> variants = {
      make_variant("ideal", ideal, pos, pad, device, graphs, runners),
      make_variant("masked", cached(longest, AttentionPath::kMasked), pos, pad, device, graphs,
                   runners),
      make_variant("attend", cached(o.max_len, AttentionPath::kAuto), pos, pad, device, graphs,
                   runners)};
  const std::vector<Stats> stats = measure_interleaved(variants, device, o.rounds, o.calls, 2);
  result.ideal_ms = stats[0].median * 1e3;
  result.masked = paired_ratio(stats[1], stats[0]);
  result.attend = paired_ratio(stats[2], stats[0]);
  return result;
}

// The command line; `contexts` gets the lengths to run.
Options parse_options(int argc, char** argv, std::vector<int64_t>* contexts) {
  Options o;
  flags::Flags flags("statickv_bench_context",
                     "decode-step cost vs context length, as ratios to ideal");
  flags.add_device(&o.device);
  flags::add_dtype(flags, &o.dtype, at::kHalf);
  apps::add_kv_dtype(flags, &o.kv_dtype);  // adds the attend-KV column
  add_stack_flags(flags, &o.stack);
  flags.add("--max-len N", &o.max_len, "cache capacity", /*min=*/2);
  flags.add("--contexts LIST", &o.contexts,
            "comma-separated lengths in [2, max-len] (default 128, 256, ... max-len)");
  flags.add("--rounds N", &o.rounds, "interleaved samples per variant and length", /*min=*/1);
  flags.add("--calls N", &o.calls, "steps per sample", /*min=*/1);
  add_threads_flag(flags, &o.threads);
  add_json_flag(flags, &o.json);
  flags.add_switch("--graphs", &o.graphs,
                   "replay captured steps (needs a CUDA device; dynamic stays eager)");
  flags.parse(argc, argv);
  check_stack(o.stack);
  if (o.contexts.empty()) {
    for (int64_t c = 128; c < o.max_len; c *= 2) contexts->push_back(c);
    contexts->push_back(o.max_len);
  } else {
    *contexts = flags::parse_int_list("--contexts", o.contexts, /*min=*/2, /*max=*/o.max_len);
  }
  return o;
}

// What every variant decodes on: the statickv cache (one row holding
// positions [0, max_len - 1)), with --kv-dtype its quantized twin, the
// ideal's contiguous copies of the same contents, and one step's q, k, v.
struct Stack {
  Stack(const Options& options, const at::Device& dev, at::ScalarType type)
      : o(options),
        device(dev),
        dtype(type),
        opts(at::TensorOptions().dtype(type).device(dev)),
        long_opts(opts.dtype(at::kLong)),
        L(options.stack.layers) {
    CacheConfig config;
    config.num_layers = L;
    config.num_kv_heads = o.stack.kv_heads;
    config.head_dim = o.stack.head_dim;
    config.max_batch = 1;
    config.max_len = o.max_len;
    config.dtype = dtype;
    config.device = device;
    cache = std::make_unique<StaticCache>(config);
    // --kv-dtype: the same cache with quantized storage, the same contents.
    storage = apps::parse_kv_storage(o.kv_dtype);
    CacheConfig quant_config = config;
    quant_config.kv_storage = storage == KvStorage::kCompute ? KvStorage::kInt8 : storage;
    if (storage != KvStorage::kCompute) quant = std::make_unique<StaticCache>(quant_config);
    fill();
  }

  // Random contents, the same in every cache; then q, k and v.
  void fill() {
    at::manual_seed(0);
    {
      StepPlan plan = cache->prepare(at::arange(o.max_len - 1, long_opts), 1);
      std::optional<StepPlan> quant_fill;
      if (quant) quant_fill = quant->prepare(at::arange(o.max_len - 1, long_opts), 1);
      for (int64_t l = 0; l < L; ++l) {
        const at::Tensor kv =
            at::randn({1, o.stack.kv_heads, o.max_len - 1, o.stack.head_dim}, opts);
        cache->update(l, kv, kv, plan);
        if (quant) quant->update(l, kv, kv, *quant_fill);
      }
    }
    // ideal: per layer a contiguous [1, kv_heads, max_len, head_dim], same contents.
    for (int64_t l = 0; l < L; ++l) {
      ideal_k.push_back(cache->keys(l).narrow(2, 0, o.max_len).clone());
      ideal_v.push_back(cache->values(l).narrow(2, 0, o.max_len).clone());
    }
    q = at::randn({1, o.stack.heads, 1, o.stack.head_dim}, opts);
    k = at::randn({1, o.stack.kv_heads, 1, o.stack.head_dim}, opts);
    v = at::randn({1, o.stack.kv_heads, 1, o.stack.head_dim}, opts);
  }

  StepFn ideal_step(int64_t len) {
    return [this, len](const at::Tensor& pos) {
      at::Tensor out;
      for (int64_t l = 0; l < L; ++l) {
        ideal_k[l].index_copy_(2, pos, k);
        ideal_v[l].index_copy_(2, pos, v);
        out = at::scaled_dot_product_attention(q, ideal_k[l].narrow(2, 0, len),
                                               ideal_v[l].narrow(2, 0, len), {}, 0.0, false,
                                               std::nullopt, /*enable_gqa=*/true);
      }
      return out;
    };
  }
  StepFn ideal_masked_step(int64_t len) {
    const at::Tensor mask = at::ones({1, 1, 1, len}, opts.dtype(at::kBool));
    return [this, len, mask](const at::Tensor& pos) {
      at::Tensor out;
      for (int64_t l = 0; l < L; ++l) {
        ideal_k[l].index_copy_(2, pos, k);
        ideal_v[l].index_copy_(2, pos, v);
        out = sdpa_attention(q, ideal_k[l].narrow(2, 0, len), ideal_v[l].narrow(2, 0, len), mask);
      }
      return out;
    };
  }
  // Cache::attend on the plain cache, or (quantized) on the --kv-dtype one.
  StepFn attend_step(int64_t attend, bool quantized = false) {
    StaticCache* c = quantized ? quant.get() : cache.get();
    return [this, c, attend](const at::Tensor& pos) {
      StepPlan step = c->prepare(pos, 1, attend);
      at::Tensor out;
      for (int64_t l = 0; l < L; ++l) out = c->attend(l, q, c->update(l, k, v, step), step);
      return out;
    };
  }
  StepFn cache_step(int64_t attend, bool bool_mask = false) {
    return [this, attend, bool_mask](const at::Tensor& pos) {
      StepPlan step = cache->prepare(pos, 1, attend);
      at::Tensor out;
      for (int64_t l = 0; l < L; ++l) {
        KV kv = cache->update(l, k, v, step);
        out =
            sdpa_attention(q, kv.keys, kv.values, bool_mask ? step.mask(l) : step.additive_mask(l));
      }
      return out;
    };
  }
  // dynamic: the past (len - 1 tokens) as its own contiguous tensors.
  StepFn dynamic_step(int64_t len) {
    std::vector<at::Tensor> past_k, past_v;
    for (int64_t l = 0; l < L; ++l) {
      past_k.push_back(ideal_k[l].narrow(2, 0, len - 1).contiguous());
      past_v.push_back(ideal_v[l].narrow(2, 0, len - 1).contiguous());
    }
    return [this, past_k, past_v](const at::Tensor&) {
      at::Tensor out;
      for (int64_t l = 0; l < L; ++l) {
        const at::Tensor kk = at::cat({past_k[l], k}, 2);
        const at::Tensor vv = at::cat({past_v[l], v}, 2);
        out = at::scaled_dot_product_attention(q, kk, vv, {}, 0.0, false, std::nullopt,
                                               /*enable_gqa=*/true);
      }
      return out;
    };
  }
  std::string attend_path() const {
    return cache->attention_path(0, q) == AttentionPath::kVarlen ? "varlen" : "masked";
  }

  const Options& o;
  const at::Device device;
  const at::ScalarType dtype;
  const at::TensorOptions opts, long_opts;
  const int64_t L;
  KvStorage storage = KvStorage::kCompute;
  std::unique_ptr<StaticCache> cache, quant;
  std::vector<at::Tensor> ideal_k, ideal_v;
  at::Tensor q, k, v;
};

void print_header(const Stack& s, bool graphs, const std::string& kv_name) {
  const Options& o = s.o;
  fmt::print(
      "statickv context length: {} layers, {} q / {} kv heads x {}, max_len {}, {} on {}{}\n", s.L,
      o.stack.heads, o.stack.kv_heads, o.stack.head_dim, o.max_len, flags::dtype_name(s.dtype),
      s.device.str(), graphs ? " (graph replays)" : "");
  fmt::print("{} interleaved rounds x {} steps per variant and length, {} CPU threads\n\n",
             o.rounds, o.calls, at::get_num_threads());
  fmt::print("ratios to the ideal, median [p10, p90] of paired rounds\n");
  fmt::print("attend: Cache::attend, {} path (attend-max: attend_len = max_len)\n",
             s.attend_path());
  if (s.quant) {
    fmt::print(
        "{}: Cache::attend over the same cache stored as {} ({} bytes, plain {}); "
        "{}/attend: its ratio to attend, paired\n",
        kv_name, to_string(s.storage), s.quant->memory_bytes(), s.cache->memory_bytes(), kv_name);
  }
  fmt::print("{:>7} {:>9} {:>19} {:>19} {:>19} {:>19} {:>19} {:>19} {:>19}", "context", "ideal ms",
             "statickv", "hf-static", "dynamic (cat)", "ideal+mask", "sk-bool", "attend",
             "attend-max");
  if (s.quant) fmt::print(" {:>19} {:>19}", kv_name, kv_name + "/attend");
  fmt::print("\n");
}

using Steps = std::vector<std::pair<std::string, StepFn>>;

// One length's steps as variants: captured once per length and replayed
// with --graphs (dynamic stays eager), else run eagerly.
std::vector<Variant> length_variants(const Steps& steps, const at::Tensor& pos, int64_t len,
                                     const at::Device& device, bool graphs,
                                     std::vector<std::unique_ptr<GraphRunner>>& runners) {
  std::vector<Variant> variants;
  for (const auto& [name, fn] : steps) {
    if (graphs && name != "dynamic") {
      GraphRunner::Options ro;
      ro.device = device;
      auto runner = std::make_unique<GraphRunner>(
          // Padding (what capture warm-ups run on) is the step's own
          // position: the ideal step's index_copy_ has no scratch slot.
          std::vector<InputSpec>{{"position", at::kLong, {}, len - 1}},
          [fn = fn](const std::vector<at::Tensor>& in, const GraphKey&) {
            // [1, heads, 1, d] -> [1, 1, heads, d]: the runner's [batch, q, ...].
            return std::vector<at::Tensor>{fn(in[0].view({-1})).transpose(1, 2)};
          },
          ro);
      GraphRunner* r = runner.get();
      const at::Tensor in = pos.view({1, 1});
      variants.push_back({name, [r, in] { r->run({in}); }});
      runners.push_back(std::move(runner));
    } else {
      variants.push_back({name, [fn = fn, pos] { fn(pos); }});
    }
  }
  return variants;
}

// The worst ratios over the lengths so far.
struct Totals {
  bool all_ok = true;
  double worst_attend = 0, worst_attend_4096 = 0;
};

// Prints one length's row of ratios; its JSON row.
Json report_length(const Stack& s, int64_t len, const Steps& steps, const std::vector<Stats>& stats,
                   Totals* totals) {
  const Stats sk = paired_ratio(stats[1], stats[0]);
  const Stats hf = paired_ratio(stats[2], stats[0]);
  const Stats dyn = paired_ratio(stats[3], stats[0]);
  const Stats masked = paired_ratio(stats[4], stats[0]);
  const Stats bool_mask = paired_ratio(stats[5], stats[0]);
  const Stats att = paired_ratio(stats[6], stats[0]);
  const Stats att_max = paired_ratio(stats[7], stats[0]);
  totals->worst_attend = std::max(totals->worst_attend, att.median);
  if (len <= 4096) totals->worst_attend_4096 = std::max(totals->worst_attend_4096, att.median);
  const bool ok = sk.median <= 1.15;
  totals->all_ok = totals->all_ok && ok;
  auto cell = [](const Stats& r) {
    return fmt::format("{:.2f} [{:.2f}, {:.2f}]", r.median, r.p10, r.p90);
  };
  fmt::print("{:>7} {:>9.3f} {:>19} {:>19} {:>19} {:>19} {:>19} {:>19} {:>19}", len,
             stats[0].median * 1e3, cell(sk), cell(hf), cell(dyn), cell(masked), cell(bool_mask),
             cell(att), cell(att_max));
  Json row = Json::object({{"context", len}});
  if (s.quant) {
    const Stats kv = paired_ratio(stats[8], stats[0]);
    const Stats kv_vs_attend = paired_ratio(stats[8], stats[6]);
    fmt::print(" {:>19} {:>19}", cell(kv), cell(kv_vs_attend));
    row["attend_kv_ratio"] = to_json(kv);
    row["attend_kv_vs_attend"] = to_json(kv_vs_attend);
  }
  fmt::print("{}\n", ok ? "" : "  ABOVE TARGET");
  for (size_t i = 0; i < steps.size(); ++i) row[steps[i].first + "_s"] = to_json(stats[i]);
  row["statickv_ratio"] = to_json(sk);
  row["hf_static_ratio"] = to_json(hf);
  row["dynamic_ratio"] = to_json(dyn);
  row["ideal_mask_ratio"] = to_json(masked);
  row["bool_mask_ratio"] = to_json(bool_mask);
  row["attend_ratio"] = to_json(att);
  row["attend_max_ratio"] = to_json(att_max);
  return row;
}

// Every variant at one context length, interleaved; prints and returns its row.
Json measure_length(Stack& s, int64_t len, bool graphs, const std::string& kv_name,
                    Totals* totals) {
  const at::Tensor pos = at::full({1}, len - 1, s.long_opts);
  Steps steps = {{"ideal", s.ideal_step(len)},
                 {"statickv", s.cache_step(len)},
                 {"hf-static", s.cache_step(s.o.max_len)},
                 {"dynamic", s.dynamic_step(len)},
                 {"ideal+mask", s.ideal_masked_step(len)},
                 {"sk-bool", s.cache_step(len, /*bool_mask=*/true)},
                 {"attend", s.attend_step(len)},
                 {"attend-max", s.attend_step(s.o.max_len)}};
  if (s.quant) steps.emplace_back(kv_name, s.attend_step(len, /*quantized=*/true));
  std::vector<std::unique_ptr<GraphRunner>> runners;
  const std::vector<Variant> variants = length_variants(steps, pos, len, s.device, graphs, runners);
  const std::vector<Stats> stats =
      measure_interleaved(variants, s.device, s.o.rounds, s.o.calls, 2);
  return report_length(s, len, steps, stats, totals);
}

// Kernels (graph nodes on CUDA) or ATen ops (elsewhere) of one decode step
// at `len`, masked and through Cache::attend: printed, and as JSON.
Json kernels_per_decode_step(Stack& s, int64_t len, bool graphs) {
  const at::Tensor last_pos = at::full({1}, len - 1, s.long_opts);
  const int64_t masked_kernels =
      kernels_per_step([&] { s.cache_step(len)(last_pos); }, s.device, graphs);
  const int64_t attend_kernels =
      kernels_per_step([&] { s.attend_step(len)(last_pos); }, s.device, graphs);
  const std::string unit = graphs ? "CUDA graph kernel nodes" : "ATen ops";
  fmt::print("{} per decode step ({} layers): masked {}, attend {}\n", unit, s.L, masked_kernels,
             attend_kernels);
  return Json::object({{"unit", unit}, {"masked", masked_kernels}, {"attend", attend_kernels}});
}

void print_ragged(const RaggedResult& ragged) {
  fmt::print(
      "\nragged: 16 rows, lengths {}..{}; ideal {:.3f} ms; masked {:.2f} [{:.2f}, {:.2f}], "
      "attend {:.2f} [{:.2f}, {:.2f}]\n",
      ragged.lengths.front(), ragged.lengths.back(), ragged.ideal_ms, ragged.masked.median,
      ragged.masked.p10, ragged.masked.p90, ragged.attend.median, ragged.attend.p10,
      ragged.attend.p90);
}

Json result_json(const Stack& s, bool graphs, const Json& rows, const Totals& totals,
                 const RaggedResult& ragged, const Json& kernels, const std::string& command) {
  const Options& o = s.o;
  return Json::object({{"benchmark", "context_length"},
                       {"command", command},
                       {"environment", environment(s.device)},
                       {"dtype", flags::dtype_name(s.dtype)},
                       {"layers", s.L},
                       {"heads", o.stack.heads},
                       {"kv_heads", o.stack.kv_heads},
                       {"head_dim", o.stack.head_dim},
                       {"max_len", o.max_len},
                       {"graphs", graphs},
                       {"rounds", o.rounds},
                       {"calls", o.calls},
                       {"rows", rows},
                       {"attend_path", s.attend_path()},
                       {"decode_vs_ideal_max", totals.worst_attend},
                       {"decode_vs_ideal_max_upto_4096", totals.worst_attend_4096},
                       {"ragged_vs_ideal", ragged.attend.median},
                       {"ragged_masked_vs_ideal", ragged.masked.median},
                       {"ragged_lengths", ragged.lengths},
                       {"kernels_per_decode_step", kernels}});
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<int64_t> contexts;
  const Options o = parse_options(argc, argv, &contexts);
  flags::set_threads(o.threads);
  c10::InferenceMode inference;  // as inference code runs: no autograd bookkeeping per op
  const at::Device device = flags::parse_device(o.device);
  const at::ScalarType dtype = flags::parse_dtype(o.dtype, device, at::kHalf);
  if (o.graphs && !device.is_cuda()) {
    throw flags::FlagError("--graphs: expected a CUDA device (--device cuda) but got " +
                           device.str());
  }
  const bool graphs = o.graphs;

  Stack s(o, device, dtype);
  const std::string kv_name = std::string("attend-") + to_string(s.storage);
  print_header(s, graphs, kv_name);
  Json rows = Json::array();
  Totals totals;
  for (int64_t len : contexts) rows.push_back(measure_length(s, len, graphs, kv_name, &totals));
  fmt::print("\nstatickv <= 1.15x the ideal at every length: {}\n", totals.all_ok ? "yes" : "NO");
  fmt::print("attend: worst median ratio {:.3f} (up to 4096 tokens: {:.3f})\n", totals.worst_attend,
             totals.worst_attend_4096);

  const Json kernels = kernels_per_decode_step(s, contexts.back(), graphs);
  const RaggedResult ragged = measure_ragged(o, device, dtype, graphs);
  print_ragged(ragged);
  write_json(o.json,
             result_json(s, graphs, rows, totals, ragged, kernels, command_line(argc, argv)));
  return 0;
} catch (...) {
  return flags::fail("statickv_bench_context");
}
