// statickv_bench_speculative: speculative decoding (Generator with
// GenerateOptions::speculate) against plain greedy decoding, side by side in
// one process, one prompt at a time (batch 1, where decoding is
// latency-bound).
//
// Workload, stated as it is:
// - --checkpoint DIR (SmolLM2-135M-Instruct, tools/smollm2/convert.py):
//   chat prompts that ask the model to repeat a passage word for word, so
//   its answers copy spans of the prompt; drafting by prompt lookup with
//   N = 2, 4, 8 drafts per step.
// - --shape S (random weights; no checkpoint): a random model copies
//   nothing, so prompt lookup finds only the loops its greedy output falls
//   into; the draft-model path runs with the target as its own draft
//   (acceptance 1 by construction: the machinery's cost at its best case).
//
// Every variant's tokens are compared with plain decoding's (greedy: they
// must be identical). Reported per variant: decode tokens/s (tokens after
// the first over decode time), its ratio to plain per round (median, p10,
// p90 over rounds), acceptance rate, tokens per verification step.

#include "bench_model.hpp"

#ifdef STATICKV_BENCH_TOKENIZER
#include <statickv/model/checkpoint.hpp>
#include <statickv/text/chat_template.hpp>
#include <statickv/text/tokenizer.hpp>
#endif

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

using namespace statickv;
using namespace statickv::bench;

namespace {

struct Options {
  std::string checkpoint, shape = "tiny", device = "auto", dtype, json;
  int64_t max_new = 64, rounds = 3, seed = 0;
  int threads = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  flags::Flags flags("statickv_bench_speculative",
                     "speculative decoding (prompt lookup, draft model) vs plain greedy decoding");
  flags.add("--checkpoint DIR", &o.checkpoint,
            "SmolLM2 checkpoint with tokenizer.json and its chat template: repeat-the-passage "
            "prompts (default: --shape with random weights)");
  add_shape_flag(flags, &o.shape, "model shape without --checkpoint, random weights");
  flags.add_device(&o.device);
  flags::add_dtype(flags, &o.dtype, at::kBFloat16);
  flags.add("--max-new N", &o.max_new, "most new tokens per prompt", /*min=*/2);
  flags.add("--rounds N", &o.rounds, "rounds, every variant once per round", /*min=*/1);
  flags.add("--seed N", &o.seed, "random weights and prompts", /*min=*/0);
  add_threads_flag(flags, &o.threads);
  add_json_flag(flags, &o.json);
  flags.parse(argc, argv);
  return o;
}

// Passages the copy prompts ask the model to repeat.
const char* const kPassages[] = {
    "The quick brown fox jumps over the lazy dog. The dog wakes up, looks around the quiet "
    "garden and goes back to sleep under the old apple tree.",
    "A cache keeps the keys and values of every token a model has read, so that each new "
    "token attends to them without computing them again.",
};

std::vector<std::vector<int64_t>> copy_prompts(const std::string& dir) {
#ifdef STATICKV_BENCH_TOKENIZER
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(dir);
  const tokenizer::ChatTemplate chat = tokenizer::ChatTemplate::load(dir);
  std::vector<std::vector<int64_t>> out;
  for (const char* passage : kPassages) {
    out.push_back(tokenizer::apply_chat(
        tok, chat,
        tokenizer::user_turn(std::string("Repeat the following text exactly, word for word, "
                                         "and nothing else:\n\n") +
                             passage)));
  }
  return out;
#else
  throw flags::FlagError("--checkpoint: expected a build with statickv::tokenizer (" + dir + ")");
#endif
}

std::vector<std::vector<int64_t>> random_prompts(int64_t vocab, uint64_t seed) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<std::vector<int64_t>> out;
  for (const int64_t len : {24, 40}) {
    const at::Tensor ids = at::randint(vocab, {len}, g, at::TensorOptions().dtype(at::kLong));
    out.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + len);
  }
  return out;
}

struct Arm {
  std::string name;
  int64_t speculate = 0;
  bool draft_self = false;
  std::unique_ptr<reference::Generator> session;
  std::vector<double> tokens_per_s;  // per round
  std::vector<std::vector<int64_t>> tokens;
  reference::SpeculationStats spec;
};

/// One round of an arm: every prompt alone; returns decode tokens/s.
double run_round(Arm& arm, const std::vector<std::vector<int64_t>>& prompts) {
  double seconds = 0;
  int64_t tokens = 0;
  arm.tokens.clear();
  for (const auto& prompt : prompts) {
    const reference::GenerateResult r = arm.session->generate({prompt});
    seconds += r.decode_seconds;
    tokens += static_cast<int64_t>(r.tokens[0].size()) - 1;
    arm.tokens.push_back(r.tokens[0]);
    arm.spec.verify_steps += r.speculation.verify_steps;
    arm.spec.drafted += r.speculation.drafted;
    arm.spec.accepted += r.speculation.accepted;
  }
  return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0;
}

std::vector<Arm> make_arms(const reference::LlamaModel& model, const Options& o, int64_t max_len,
                           bool random_weights) {
  std::vector<Arm> arms;
  arms.push_back(Arm{"plain", 0, false, {}, {}, {}, {}});
  for (const int64_t n : {2, 4, 8}) {
    arms.push_back(Arm{fmt::format("lookup-{}", n), n, false, {}, {}, {}, {}});
  }
  if (random_weights) arms.push_back(Arm{"draft-self-4", 4, true, {}, {}, {}, {}});
  for (Arm& arm : arms) {
    reference::GenerateOptions g;
    g.max_new_tokens = o.max_new;
    g.bucketed = model.device().is_cuda();  // exact shapes on a CPU, as demo.sh runs
    g.speculate = arm.speculate;
    g.draft_model = arm.draft_self ? &model : nullptr;
    arm.session = std::make_unique<reference::Generator>(model, g, 1, max_len);
  }
  return arms;
}

void report(const std::vector<Arm>& arms, const Options& o, const std::string& workload,
            const at::Device& device, int argc, char** argv) {
  const Stats plain = summarize_keep(arms[0].tokens_per_s);
  Json rows = Json::array();
  fmt::print("{:<14} {:>10} {:>24} {:>11} {:>10} {:>10}\n", "variant", "tok/s", "vs plain",
             "acceptance", "tok/step", "identical");
  for (const Arm& arm : arms) {
    const Stats s = summarize_keep(arm.tokens_per_s);
    const Stats ratio = paired_ratio(s, plain);
    const bool same = arm.tokens == arms[0].tokens;
    const double per_step =
        arm.spec.verify_steps > 0
            ? static_cast<double>(arm.spec.accepted + arm.spec.verify_steps) / arm.spec.verify_steps
            : 1.0;
    fmt::print("{:<14} {:>10.1f} {:>24} {:>10.1f}% {:>10.2f} {:>10}\n", arm.name, s.median,
               ratio_text(ratio), 100.0 * arm.spec.acceptance_rate(), per_step,
               same ? "yes" : "NO");
    rows.push_back(Json::object({{"variant", arm.name},
                                 {"speculate", arm.speculate},
                                 {"draft", arm.draft_self ? "target itself" : ""},
                                 {"tokens_per_s", to_json(s)},
                                 {"vs_plain", to_json(ratio)},
                                 {"acceptance_rate", arm.spec.acceptance_rate()},
                                 {"tokens_per_verify_step", per_step},
                                 {"identical_to_plain", same}}));
  }
  write_json(o.json, Json::object({{"benchmark", "speculative"},
                                   {"command", command_line(argc, argv)},
                                   {"environment", environment(device)},
                                   {"workload", workload},
                                   {"rounds", o.rounds},
                                   {"variants", rows}}));
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  flags::set_threads(o.threads);
  const at::Device device = flags::parse_device(o.device);
  const at::ScalarType dtype = flags::parse_dtype(o.dtype, device, at::kBFloat16);
  c10::InferenceMode inference;
  std::unique_ptr<reference::LlamaModel> model;
  std::vector<std::vector<int64_t>> prompts;
  std::string workload;
  if (!o.checkpoint.empty()) {
    reference::Checkpoint ckpt = reference::load_checkpoint(o.checkpoint, dtype, device);
    model = std::make_unique<reference::LlamaModel>(ckpt.config, std::move(ckpt.weights));
    prompts = copy_prompts(o.checkpoint);
    workload = "SmolLM2 chat prompts asking to repeat a passage word for word (answers copy it)";
  } else {
    model = random_model(o.shape, dtype, device, static_cast<uint64_t>(o.seed));
    prompts = random_prompts(model->config().vocab_size, static_cast<uint64_t>(o.seed));
    workload = o.shape +
               " with random weights and random prompts (no copying); draft-self: the "
               "target as its own draft";
  }
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const int64_t max_len = static_cast<int64_t>(longest) + o.max_new;
  std::vector<Arm> arms = make_arms(*model, o, max_len, o.checkpoint.empty());
  fmt::print("statickv_bench_speculative: {}; {} prompts alone, up to {} new tokens, {} rounds\n",
             workload, prompts.size(), o.max_new, o.rounds);
  for (Arm& arm : arms) run_round(arm, prompts);  // warm-up, untimed
  for (Arm& arm : arms) arm.spec = reference::SpeculationStats{};
  for (int64_t r = 0; r < o.rounds; ++r) {
    for (size_t j = 0; j < arms.size(); ++j) {  // rotating order, as measure_interleaved
      Arm& arm = arms[(j + static_cast<size_t>(r)) % arms.size()];
      arm.tokens_per_s.push_back(run_round(arm, prompts));
    }
  }
  report(arms, o, workload, device, argc, argv);
  return 0;
} catch (...) {
  return flags::fail("statickv_bench_speculative");
}
