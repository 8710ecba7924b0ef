// statickv-demo: runs the reference decoder on a named shape with random
// weights or on a Hugging Face checkpoint directory, through a static or
// hybrid cache and the DynamicCache baseline, and reports speed, memory and
// whether both produced identical tokens. See --help.

#include <statickv/reference/generate.hpp>

#include <fmt/format.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>

using namespace statickv;
using namespace statickv::reference;

namespace {

const char* kUsage = R"(statickv-demo: the reference decoder through statickv's caches

usage: statickv-demo [flags]

  --checkpoint DIR       Hugging Face checkpoint (config.json + *.safetensors);
                         default: a named shape with seeded random weights
  --shape NAME           named shape when no checkpoint: tiny (default), tiny-mistral,
                         tiny-qwen2, llama-3.2-1b, llama-3.1-8b
  --device D             auto (default: cuda when available), cpu or cuda
  --dtype T              fp32, fp16 or bf16 (default fp32 on cpu, bf16 on cuda)
  --cache C              static, hybrid or dynamic (default: static for all-full
                         models, hybrid when the model has sliding layers)
  --prompt-ids IDS       comma-separated token ids, ';' between prompts; prompts may
                         differ in length (default: --batch random prompts)
  --batch N              random prompts when --prompt-ids is absent (default 4)
  --prompt-len N         longest random prompt (default 32; others are shorter)
  --max-new-tokens N     tokens to generate per prompt (default 32)
  --temperature X        0 = greedy (default); > 0 samples
  --top-k N              sample among the N most likely tokens (default 0 = all)
  --seed N               weights, random prompts and sampling (default 0)
  --prefill-chunk N      most prompt tokens per prefill pass (default: all the cache allows)
  --eager                run static/hybrid steps at their exact shapes (default: through
                         the bucketed GraphRunner, CUDA graphs on a GPU)
  --no-compare           skip the DynamicCache comparison run
  --print-ids            print each prompt's generated ids on a line of its own
  --help                 this text
)";

struct Options {
  std::string checkpoint, shape = "tiny", device = "auto", dtype, cache, prompt_ids;
  int64_t batch = 4, prompt_len = 32, max_new_tokens = 32, top_k = 0, prefill_chunk = 0;
  double temperature = 0.0;
  uint64_t seed = 0;
  bool compare = true, print_ids = false, eager = false;
};

int64_t to_int(const std::string& flag, const std::string& value) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty()) {
    throw std::invalid_argument(flag + ": expected an integer but got '" + value + "'");
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  const std::map<std::string, std::function<void(const std::string&)>> valued = {
      {"--checkpoint", [&](const std::string& v) { o.checkpoint = v; }},
      {"--shape", [&](const std::string& v) { o.shape = v; }},
      {"--device", [&](const std::string& v) { o.device = v; }},
      {"--dtype", [&](const std::string& v) { o.dtype = v; }},
      {"--cache", [&](const std::string& v) { o.cache = v; }},
      {"--prompt-ids", [&](const std::string& v) { o.prompt_ids = v; }},
      {"--batch", [&](const std::string& v) { o.batch = to_int("--batch", v); }},
      {"--prompt-len", [&](const std::string& v) { o.prompt_len = to_int("--prompt-len", v); }},
      {"--max-new-tokens",
       [&](const std::string& v) { o.max_new_tokens = to_int("--max-new-tokens", v); }},
      {"--temperature", [&](const std::string& v) { o.temperature = std::stod(v); }},
      {"--top-k", [&](const std::string& v) { o.top_k = to_int("--top-k", v); }},
      {"--seed",
       [&](const std::string& v) { o.seed = static_cast<uint64_t>(to_int("--seed", v)); }},
      {"--prefill-chunk",
       [&](const std::string& v) { o.prefill_chunk = to_int("--prefill-chunk", v); }},
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--no-compare") {
      o.compare = false;
    } else if (arg == "--eager") {
      o.eager = true;
    } else if (arg == "--print-ids") {
      o.print_ids = true;
    } else if (auto it = valued.find(arg); it != valued.end()) {
      if (i + 1 >= argc) throw std::invalid_argument(arg + ": expected a value");
      try {
        it->second(argv[++i]);
      } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        throw std::invalid_argument(
            what.rfind("--", 0) == 0 ? what : arg + ": bad value '" + argv[i] + "'");
      }
    } else {
      throw std::invalid_argument("unknown flag '" + arg + "' (see --help)");
    }
  }
  for (auto [flag, value] : {std::pair{"--batch", o.batch},
                             {"--prompt-len", o.prompt_len},
                             {"--max-new-tokens", o.max_new_tokens}}) {
    if (value < 1) {
      throw std::invalid_argument(std::string(flag) + ": expected >= 1 but got " +
                                  std::to_string(value));
    }
  }
  return o;
}

std::vector<std::vector<int64_t>> parse_prompts(const std::string& text) {
  std::vector<std::vector<int64_t>> prompts;
  std::stringstream rows(text);
  std::string row;
  while (std::getline(rows, row, ';')) {
    std::vector<int64_t> ids;
    std::stringstream cells(row);
    std::string cell;
    while (std::getline(cells, cell, ',')) {
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      if (!cell.empty()) ids.push_back(to_int("--prompt-ids", cell));
    }
    if (ids.empty()) throw std::invalid_argument("--prompt-ids: a prompt has no token ids");
    prompts.push_back(std::move(ids));
  }
  if (prompts.empty()) throw std::invalid_argument("--prompt-ids: expected at least one prompt");
  return prompts;
}

at::Device pick_device(const std::string& name) {
  if (name == "auto") return torch::cuda::is_available() ? at::Device(at::kCUDA, 0) : at::kCPU;
  if (name == "cpu") return at::kCPU;
  if (name == "cuda") {
    if (!torch::cuda::is_available()) throw std::invalid_argument("--device cuda: no CUDA device");
    return at::Device(at::kCUDA, 0);
  }
  throw std::invalid_argument("--device: expected auto, cpu or cuda but got '" + name + "'");
}

at::ScalarType pick_dtype(const std::string& name, const at::Device& device) {
  if (name.empty()) return device.is_cuda() ? at::kBFloat16 : at::kFloat;
  if (name == "fp32" || name == "float32") return at::kFloat;
  if (name == "fp16" || name == "float16") return at::kHalf;
  if (name == "bf16" || name == "bfloat16") return at::kBFloat16;
  throw std::invalid_argument("--dtype: expected fp32, fp16 or bf16 but got '" + name + "'");
}

std::string bytes(int64_t n) {
  const double b = static_cast<double>(n);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.1f} KiB", b / 1024.0);
}

void report(const char* name, const GenerateResult& r, int64_t rows) {
  const double ms = r.decode_steps > 0 ? r.decode_seconds * 1e3 / r.decode_steps : 0.0;
  const double tps = r.decode_seconds > 0 ? rows * r.decode_steps / r.decode_seconds : 0.0;
  fmt::print("{:<8} prefill {:>9.2f} ms | decode {:>8.2f} ms/step {:>9.1f} tok/s | cache {}\n",
             name, r.prefill_seconds * 1e3, ms, tps, bytes(r.cache_bytes));
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  const at::Device device = pick_device(o.device);
  const at::ScalarType dtype = pick_dtype(o.dtype, device);

  std::unique_ptr<LlamaModel> model;
  std::string source;
  if (!o.checkpoint.empty()) {
    Checkpoint ckpt = load_checkpoint(o.checkpoint, dtype, device);
    model = std::make_unique<LlamaModel>(ckpt.config, std::move(ckpt.weights));
    source = o.checkpoint;
  } else {
    const ModelConfig config = named_config(o.shape);
    model = std::make_unique<LlamaModel>(config, random_weights(config, o.seed, dtype, device));
    source = o.shape + " (random weights, seed " + std::to_string(o.seed) + ")";
  }
  const ModelConfig& config = model->config();

  std::vector<std::vector<int64_t>> prompts;
  if (!o.prompt_ids.empty()) {
    prompts = parse_prompts(o.prompt_ids);
  } else {
    std::mt19937_64 rng(o.seed);
    for (int64_t r = 0; r < o.batch; ++r) {
      const int64_t len = std::max<int64_t>(1, o.prompt_len - (r * o.prompt_len) / (o.batch + 1));
      std::vector<int64_t> ids;
      for (int64_t t = 0; t < len; ++t) {
        ids.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(config.vocab_size)));
      }
      prompts.push_back(std::move(ids));
    }
  }

  GenerateOptions options;
  options.max_new_tokens = o.max_new_tokens;
  options.temperature = o.temperature;
  options.top_k = o.top_k;
  options.seed = o.seed;
  options.prefill_chunk = o.prefill_chunk;
  options.bucketed = !o.eager;
  options.cache = o.cache.empty() ? (config.has_sliding() ? CacheKind::kHybrid : CacheKind::kStatic)
                                  : parse_cache_kind(o.cache);
  // Progress on runs longer than a couple of seconds, on stderr.
  const auto started = std::chrono::steady_clock::now();
  options.on_step = [&](int64_t done, int64_t planned) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (elapsed > 2.0)
      std::fprintf(stderr, "\r  decode %lld/%lld", static_cast<long long>(done),
                   static_cast<long long>(planned));
    if (elapsed > 2.0 && done == planned) std::fputs("\n", stderr);
  };

  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  fmt::print("statickv-demo: {} | {} layers ({}), {} heads / {} kv x {} | {} on {}\n", source,
             config.num_hidden_layers, config.has_sliding() ? "with sliding layers" : "all full",
             config.num_attention_heads, config.num_key_value_heads, config.head_dim,
             dtype == at::kFloat  ? "fp32"
             : dtype == at::kHalf ? "fp16"
                                  : "bf16",
             device.str());
  fmt::print("{} prompts (longest {} tokens), {} new tokens each, {}\n", prompts.size(), longest,
             o.max_new_tokens, o.temperature > 0 ? "sampling" : "greedy");

  // Each cache kind runs in its own session, warmed up by one untimed call:
  // the first pass pays one-time costs (thread pools, kernel selection, CUDA
  // graph capture for the keys this run uses) that are not the cache's.
  const int64_t rows = static_cast<int64_t>(prompts.size());
  const int64_t max_len = static_cast<int64_t>(longest) + o.max_new_tokens;
  auto timed = [&](const GenerateOptions& opts) {
    Generator session(*model, opts, rows, max_len);
    session.generate(prompts);
    return session.generate(prompts);
  };
  const GenerateResult main_run = timed(options);
  report(to_string(options.cache), main_run, static_cast<int64_t>(prompts.size()));
  if (o.compare && options.cache != CacheKind::kDynamic) {
    GenerateOptions dyn = options;
    dyn.cache = CacheKind::kDynamic;
    dyn.on_step = nullptr;
    const GenerateResult baseline = timed(dyn);
    report("dynamic", baseline, static_cast<int64_t>(prompts.size()));
    const bool same = baseline.tokens == main_run.tokens;
    fmt::print("{} and dynamic caches produced identical tokens: {}\n", to_string(options.cache),
               same ? "yes" : "NO");
  }
  if (o.print_ids) {
    for (const auto& row : main_run.tokens) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) line += (i ? "," : "") + std::to_string(row[i]);
      std::puts(line.c_str());
    }
  }
  return 0;
} catch (const c10::Error& e) {
  std::fprintf(stderr, "statickv-demo: %s\n", e.what_without_backtrace());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "statickv-demo: %s\n", e.what());
  return 2;
}
