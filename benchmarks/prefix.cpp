// statickv_bench_prefix: the Scheduler with its prefix cache on and off
// (Note [prefix cache], docs/serving.md) on two replayed workloads, side by
// side in one run, the same requests both ways:
//
//   system  --requests requests: one system prompt of --system tokens and a
//           question of 8..24 tokens each; Poisson arrivals at --rate
//           requests/s.
//   chat    --users users x --turns turns: a user's first prompt is an
//           opening of --opening tokens and a --message-token message; each
//           next turn is the conversation so far (every prompt and answer)
//           and a new message, submitted when the user's last turn finishes
//           (closed loop); first turns arrive Poisson at --rate.
//
// Greedy, --new tokens a request, no stop token, random ids (seeded). Reported
// for each workload and mode: time to first token p50 / p99, throughput,
// occupancy, the pool's hits, reused tokens and bytes, and how many
// requests got identical tokens both ways.

#include "bench_model.hpp"
#include "serving_trace.hpp"

#include <statickv/engine/scheduler.hpp>
#include <statickv/model/checkpoint.hpp>

#include <fmt/format.h>

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <thread>

using namespace statickv;
using namespace statickv::bench;

namespace {

struct Options {
  std::string checkpoint, shape = "small", device = "auto", dtype, json;
  int64_t requests = 64, system = 1000, users = 16, turns = 4, opening = 200, message = 16;
  int64_t new_tokens = 16, max_batch = 8, max_len = 2048, prefill_chunk = 256, seed = 0;
  double rate = 1.0;
  int threads = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  flags::Flags flags(
      "statickv_bench_prefix",
      "the Scheduler's prefix cache on and off: a shared system prompt and multi-turn "
      "chats");
  flags.add("--checkpoint DIR", &o.checkpoint,
            "a Hugging Face checkpoint (SmolLM2 from "
            "tools/smollm2/convert.py); default: --shape");
  add_shape_flag(flags, &o.shape, "model shape without --checkpoint, random weights");
  flags.add_device(&o.device);
  flags::add_dtype(flags, &o.dtype, at::kBFloat16);
  flags.add("--requests N", &o.requests, "system workload: requests", /*min=*/1);
  flags.add("--system N", &o.system, "system workload: system prompt tokens", /*min=*/1);
  flags.add("--users N", &o.users, "chat workload: users", /*min=*/1);
  flags.add("--turns N", &o.turns, "chat workload: turns per user", /*min=*/1);
  flags.add("--opening N", &o.opening, "chat workload: a conversation's first tokens", /*min=*/1);
  flags.add("--message N", &o.message, "chat workload: tokens a user adds per turn", /*min=*/1);
  flags.add("--new N", &o.new_tokens, "tokens generated per request", /*min=*/1);
  flags.add("--rate R", &o.rate, "mean arrivals per second (Poisson)", /*min=*/0.0);
  flags.add("--max-batch N", &o.max_batch, "cache rows", /*min=*/1);
  flags.add("--max-len N", &o.max_len, "positions per row", /*min=*/2);
  flags.add("--prefill-chunk N", &o.prefill_chunk, "prompt tokens per row per step", /*min=*/1);
  flags.add("--seed N", &o.seed, "ids, arrivals and weights", /*min=*/0);
  flags.add("--threads N", &o.threads, "CPU threads (0: LibTorch's choice)", /*min=*/0);
  flags.add("--json FILE", &o.json, "write the results there");
  flags.parse(argc, argv);
  return o;
}

/// A request due at `arrival` seconds from the start.
struct Due {
  double arrival = 0;
  reference::Request request;
};

/// What to submit next when a request completes (the chat's next turn).
using NextTurn = std::function<std::optional<reference::Request>(const reference::Completion&)>;

/// Replays `due` (sorted by arrival) through `engine` in real time; a
/// completion may add a request due at once. Returns each request's outcome
/// by id.
std::map<std::string, Served> replay(reference::Scheduler& engine, std::deque<Due> due,
                                     const NextTurn& next_turn) {
  std::map<std::string, Served> served;
  size_t open = due.size();
  const auto start = ServeClock::now();
  while (open > 0) {
    while (!due.empty() && due_at(start, due.front().arrival) <= ServeClock::now()) {
      reference::Request r = std::move(due.front().request);
      r.arrival = due_at(start, due.front().arrival);
      due.pop_front();
      engine.submit(std::move(r));
    }
    if (engine.idle()) {
      std::this_thread::sleep_until(due_at(start, due.front().arrival));
      continue;
    }
    engine.step();
    for (reference::Completion& c : engine.take_finished()) {
      Served& s = served[c.id];
      s.ttft = c.stats.ttft_seconds;
      s.per_token =
          c.stats.decode_tokens_per_second > 0 ? 1.0 / c.stats.decode_tokens_per_second : 0.0;
      s.finish = since(start, ServeClock::now());
      --open;
      if (std::optional<reference::Request> next = next_turn(c)) {
        due.push_front(Due{s.finish, std::move(*next)});
        ++open;
      }
      s.tokens = std::move(c.tokens);
    }
  }
  return served;
}

struct Ids {
  std::mt19937_64 rng;
  int64_t vocab;
  std::vector<int64_t> operator()(int64_t n) {
    std::vector<int64_t> out;
    for (int64_t i = 0; i < n; ++i) out.push_back(3 + static_cast<int64_t>(rng() % (vocab - 3)));
    return out;
  }
};

reference::Request request(std::string id, std::vector<int64_t> prompt, int64_t new_tokens) {
  reference::Request r;
  r.id = std::move(id);
  r.prompt = std::move(prompt);
  r.max_new_tokens = new_tokens;
  r.stop = std::vector<int64_t>{};
  return r;
}

std::deque<Due> system_workload(const Options& o, int64_t vocab) {
  Ids ids{std::mt19937_64(static_cast<uint64_t>(o.seed)), vocab};
  std::exponential_distribution<double> gap(o.rate > 0 ? o.rate : 1.0);
  const std::vector<int64_t> system = ids(o.system);
  std::deque<Due> out;
  double t = 0;
  for (int64_t i = 0; i < o.requests; ++i) {
    std::vector<int64_t> prompt = system;
    const std::vector<int64_t> question = ids(8 + static_cast<int64_t>(ids.rng() % 17));
    prompt.insert(prompt.end(), question.begin(), question.end());
    out.push_back(Due{t, request("s" + std::to_string(i), std::move(prompt), o.new_tokens)});
    t += o.rate > 0 ? gap(ids.rng) : 0.0;
  }
  return out;
}

/// The chat workload: first turns, and the rule that builds each next turn
/// from a completion (the same messages in both modes: drawn per user and turn).
struct Chat {
  std::deque<Due> first;
  std::map<std::string, std::vector<int64_t>> prompts;      // by request id
  std::vector<std::vector<std::vector<int64_t>>> messages;  // [user][turn]
  int64_t turns = 0, new_tokens = 0;

  std::optional<reference::Request> next(const reference::Completion& c) {
    const size_t dot = c.id.find('.');
    const auto user = static_cast<size_t>(std::stoul(c.id.substr(1, dot - 1)));
    const int64_t turn = std::stoll(c.id.substr(dot + 1)) + 1;
    if (turn >= turns) return std::nullopt;
    std::vector<int64_t> prompt = prompts.at(c.id);
    prompt.insert(prompt.end(), c.tokens.begin(), c.tokens.end());
    const std::vector<int64_t>& message = messages[user][static_cast<size_t>(turn)];
    prompt.insert(prompt.end(), message.begin(), message.end());
    const std::string id = "u" + std::to_string(user) + "." + std::to_string(turn);
    prompts[id] = prompt;
    return request(id, std::move(prompt), new_tokens);
  }
};

Chat chat_workload(const Options& o, int64_t vocab) {
  Ids ids{std::mt19937_64(static_cast<uint64_t>(o.seed) + 1), vocab};
  std::exponential_distribution<double> gap(o.rate > 0 ? o.rate : 1.0);
  Chat chat;
  chat.turns = o.turns;
  chat.new_tokens = o.new_tokens;
  double t = 0;
  for (int64_t u = 0; u < o.users; ++u) {
    chat.messages.emplace_back();
    for (int64_t turn = 0; turn < o.turns; ++turn) chat.messages.back().push_back(ids(o.message));
    std::vector<int64_t> prompt = ids(o.opening);
    prompt.insert(prompt.end(), chat.messages.back()[0].begin(), chat.messages.back()[0].end());
    const std::string id = "u" + std::to_string(u) + ".0";
    chat.prompts[id] = prompt;
    chat.first.push_back(Due{t, request(id, std::move(prompt), o.new_tokens)});
    t += o.rate > 0 ? gap(ids.rng) : 0.0;
  }
  return chat;
}

struct ModeResult {
  Summary summary;
  reference::SchedulerStats stats;
  std::map<std::string, Served> served;
};

ModeResult run_mode(const reference::LlamaModel& model, const Options& o, bool prefix,
                    std::deque<Due> due, const NextTurn& next_turn) {
  reference::SchedulerOptions so;
  so.cache =
      model.config().has_sliding() ? reference::CacheKind::kHybrid : reference::CacheKind::kStatic;
  so.max_batch = o.max_batch;
  so.max_len = o.max_len;
  so.prefill_chunk = o.prefill_chunk;
  so.bucketed = model.device().is_cuda();  // exact shapes on a CPU
  so.prefix_cache_bytes = prefix ? -1 : 0;
  reference::Scheduler engine(model, so);
  engine.warm_up();
  ModeResult out;
  out.served = replay(engine, std::move(due), next_turn);
  std::vector<Served> all;
  int64_t tokens = 0;
  for (const auto& [id, s] : out.served) {
    all.push_back(s);
    tokens += static_cast<int64_t>(s.tokens.size());
  }
  out.summary = summarize(all, tokens);
  out.stats = engine.stats();
  return out;
}

Json mode_json(const ModeResult& m) {
  Json j = to_json(m.summary);
  j["occupancy"] = m.stats.occupancy();
  j["prefix_hits"] = m.stats.prefix_hits;
  j["prefix_tokens_reused"] = m.stats.prefix_tokens_reused;
  j["prefix_bytes"] = m.stats.prefix_bytes;
  j["prefix_budget"] = m.stats.prefix_budget;
  j["prefix_entries"] = m.stats.prefix_entries;
  j["prefix_evictions"] = m.stats.prefix_evictions;
  return j;
}

/// Runs one workload off then on and prints both rows and the ratios.
Json workload(const char* name, const reference::LlamaModel& model, const Options& o,
              const std::function<std::deque<Due>()>& make, const NextTurn& next) {
  const ModeResult off = run_mode(model, o, false, make(), next);
  const ModeResult on = run_mode(model, o, true, make(), next);
  int64_t identical = 0;
  for (const auto& [id, s] : off.served) identical += on.served.at(id).tokens == s.tokens;
  fmt::print("\n{}: {} requests\n", name, off.served.size());
  fmt::print("{:<12} {:>10} {:>10} {:>10} {:>10} {:>12} {:>12}\n", "", "tokens/s", "makespan s",
             "ttft p50ms", "ttft p99ms", "tok p50 ms", "tok p99 ms");
  print_row("cache off", off.summary);
  print_row("cache on", on.summary);
  const reference::SchedulerStats& s = on.stats;
  fmt::print(
      "ttft p50 off / on {:.2f}x, p99 {:.2f}x, throughput on / off {:.2f}x; identical tokens "
      "{}/{}; occupancy off {:.3f}, on {:.3f}; pool: {} hits, {} tokens reused, {} entries, "
      "{:.1f} of {:.1f} MiB, {} evictions\n",
      off.summary.ttft_p50 / on.summary.ttft_p50, off.summary.ttft_p99 / on.summary.ttft_p99,
      on.summary.throughput / off.summary.throughput, identical, off.served.size(),
      off.stats.occupancy(), s.occupancy(), s.prefix_hits, s.prefix_tokens_reused, s.prefix_entries,
      s.prefix_bytes / 1048576.0, s.prefix_budget / 1048576.0, s.prefix_evictions);
  return Json::object({{"off", mode_json(off)},
                       {"on", mode_json(on)},
                       {"identical_tokens", identical},
                       {"requests", off.served.size()}});
}

std::unique_ptr<reference::LlamaModel> load_model(const Options& o, at::ScalarType dtype,
                                                  const at::Device& device) {
  if (o.checkpoint.empty()) return random_model(o.shape, dtype, device, o.seed);
  reference::Checkpoint ckpt = reference::load_checkpoint(o.checkpoint, dtype, device);
  return std::make_unique<reference::LlamaModel>(std::move(ckpt.config), std::move(ckpt.weights));
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  flags::set_threads(o.threads);
  const at::Device device = flags::parse_device(o.device);
  const at::ScalarType dtype = flags::parse_dtype(o.dtype, device, at::kBFloat16);
  const auto model = load_model(o, dtype, device);
  const int64_t vocab = model->config().vocab_size;
  fmt::print(
      "statickv_bench_prefix: {} ({}) on {}, max_batch {}, max_len {}, prefill chunk {}, {} new "
      "tokens a request, {} requests/s\n",
      o.checkpoint.empty() ? o.shape : o.checkpoint, flags::dtype_name(dtype), device.str(),
      o.max_batch, o.max_len, o.prefill_chunk, o.new_tokens, o.rate);
  const Json system = workload(
      "system prompt", *model, o, [&] { return system_workload(o, vocab); },
      [](const reference::Completion&) { return std::optional<reference::Request>(); });
  Chat chat = chat_workload(o, vocab);
  const Json chats = workload(
      "chat", *model, o, [&] { return chat.first; },
      [&](const reference::Completion& c) { return chat.next(c); });
  write_json(o.json, Json::object({{"benchmark", "prefix_cache"},
                                   {"command", command_line(argc, argv)},
                                   {"environment", environment(device)},
                                   {"system", system},
                                   {"chat", chats}}));
  return 0;
} catch (...) {
  return flags::fail("statickv_bench_prefix");
}
