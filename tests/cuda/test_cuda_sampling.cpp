// [cuda] The sampling head on a GPU (Note [sampling head], docs/sampling.md):
// the CUDA composition draws what the CPU draws from the same logits, a
// pick copies to the host once and never syncs, and a Scheduler on the GPU
// serves sampled requests as generating each alone does.

#include "support.hpp"
#include "support/generation.hpp"

#include <statickv/engine/scheduler.hpp>
#include <statickv/engine/step_count.hpp>
#include <statickv/model/checkpoint.hpp>
#include <statickv/sampling/head.hpp>

#include <numeric>

using namespace statickv;
using namespace statickv::reference;

namespace {

SamplingHead head_on(const at::Device& device, int64_t rows, int64_t vocab) {
  SamplingHeadOptions o;
  o.max_batch = rows;
  o.vocab_size = vocab;
  o.device = device;
  return SamplingHead(o);
}

}  // namespace

TEST_CASE("on CUDA, the sampling head draws the CPU's tokens with one host copy and no sync",
          "[cuda][sampling]") {
  const at::Device gpu(at::kCUDA, 0);
  const int64_t rows = 6, vocab = 4096;
  SamplingHead cpu = head_on(at::kCPU, rows, vocab), cuda = head_on(gpu, rows, vocab);
  for (int64_t r = 0; r < rows; ++r) {
    Sampling s;
    s.temperature = r == 0 ? 0.0 : 0.5 + 0.2 * static_cast<double>(r);
    s.top_p = r % 2 == 1 ? 0.9 : 1.0;
    s.top_k = r == 4 ? 50 : 0;
    s.min_p = r == 5 ? 0.02 : 0.0;
    s.presence_penalty = r == 3 ? 0.5 : 0.0;
    s.seed = static_cast<uint64_t>(r) + 11;
    s.logprobs = 3;
    cpu.set_row(r, s, {1, 2, 3}, {});
    cuda.set_row(r, s, {1, 2, 3}, {});
  }
  at::manual_seed(0);
  int64_t same = 0, total = 0;
  const std::vector<bool> takes(static_cast<size_t>(rows), true);
  for (int step = 0; step < 50; ++step) {
    const at::Tensor logits = at::randn({rows, vocab}) * 2;
    const at::Tensor on_gpu = logits.to(gpu);
    cpu.pick(logits, takes);
    OpCounter counter(gpu);
    cuda.pick(on_gpu, takes);
    const std::vector<Picked> got = cuda.fetch(rows);
    CHECK(counter.host_copies() == 1);
    CHECK(counter.syncs() == 0);
    const std::vector<Picked> want = cpu.fetch(rows);
    for (size_t r = 0; r < got.size(); ++r) same += got[r].token == want[r].token, ++total;
  }
  // Integer draws are the same bits; log and the filters' sums may round a
  // last bit differently, which parts only near-ties.
  CHECK(same >= total - 3);
}

TEST_CASE("on CUDA, the fused pick picks what the composition and the CPU pick, every setting",
          "[cuda][sampling]") {
  // Note [sampling head]: one kernel per pick on CUDA; the composition it
  // replaces and the CPU's fused pick agree with it on every stage.
  const at::Device gpu(at::kCUDA, 0);
  const int64_t rows = 7, vocab = 4096;
  const std::vector<Sampling> settings = test::every_sampling_setting();
  SamplingHeadOptions o;
  o.max_batch = rows;
  o.vocab_size = vocab;
  o.max_logprobs = 4;
  SamplingHead cpu(o);
  o.device = gpu;
  SamplingHead fused(o);
  o.fused = false;
  SamplingHead composed(o);
  for (int64_t r = 0; r < rows; ++r) {
    for (SamplingHead* head : {&cpu, &fused, &composed}) {
      head->set_row(r, settings[static_cast<size_t>(r)], {1, 2, 3}, {7, 8});
    }
  }
  at::manual_seed(3);
  int64_t same_composed = 0, same_cpu = 0, total = 0;
  for (int step = 0; step < 60; ++step) {
    const at::Tensor logits = at::randn({rows, vocab}) * (1 + step % 3);
    const std::vector<bool> takes = {true, step % 3 != 0, true, true, true, step % 2 == 0, true};
    cpu.pick(logits, takes);
    OpCounter counter(gpu);
    fused.pick(logits.to(gpu), takes);
    const std::vector<Picked> got = fused.fetch(rows);
    CHECK(counter.syncs() == 0);
    CHECK(counter.host_copies() == 1);
    composed.pick(logits.to(gpu), takes);
    const std::vector<Picked> composition = composed.fetch(rows), host = cpu.fetch(rows);
    for (size_t r = 0; r < got.size(); ++r) {
      ++total;
      same_composed += got[r].token == composition[r].token;
      same_cpu += got[r].token == host[r].token;
      if (got[r].token != composition[r].token) continue;
      CHECK(got[r].logprob.logprob == Approx(composition[r].logprob.logprob).margin(1e-5));
      for (size_t i = 0; i < got[r].logprob.top.size(); ++i) {
        CHECK(got[r].logprob.top[i].first == composition[r].logprob.top[i].first);
      }
    }
  }
  // Sums in another order and log() may part a near-tie; penalties follow picks.
  CHECK(same_composed >= total - 4);
  CHECK(same_cpu >= total - 4);
}

TEST_CASE("on CUDA, a fused pick is at most 12 launches, greedy or sampled, at batch 1 and 16",
          "[cuda][sampling]") {
  const at::Device gpu(at::kCUDA, 0);
  const std::vector<Sampling> settings = test::every_sampling_setting();
  for (const int64_t batch : {1, 16}) {
    for (const size_t which : {size_t{0}, size_t{1}, size_t{5}}) {
      INFO("batch " << batch << ", settings of row " << which);
      const reference::StepCount n = reference::count_head_pick(4096, batch, settings[which], gpu);
      CHECK(n.outside <= 12);
      CHECK(n.host_copies == 1);
      CHECK(n.syncs == 0);
    }
  }
}

TEST_CASE("on CUDA, a Scheduler step copies to the host once and never syncs, greedy or sampled",
          "[cuda][sampling][serving]") {
  const at::Device gpu(at::kCUDA, 0);
  const ModelConfig config = named_config("tiny");
  const LlamaModel model(config, random_weights(config, 3, at::kFloat, gpu));
  for (const int64_t batch : {1, 16}) {
    for (const bool sampled : {false, true}) {
      INFO("batch " << batch << (sampled ? ", sampled" : ", greedy"));
      SchedulerOptions o = test::static_rows(batch);
      o.prefix_cache_bytes = 0;
      Scheduler engine(model, o);
      engine.warm_up();
      test::submit_counted_batch(engine, batch, sampled);
      engine.step();  // every prompt
      engine.step();  // a first decode step: its graph is warm
      OpCounter counter(gpu);
      engine.step();
      CHECK(counter.host_copies() == 1);
      CHECK(counter.syncs() == 0);
    }
  }
}

TEST_CASE("on CUDA, prefix hits and saves add no sync: each step copies to the host once",
          "[cuda][serving][prefix]") {
  // Note [prefix cache]: saves at the host's length onto the device,
  // restores rolled back on the device.
  const at::Device gpu(at::kCUDA, 0);
  const ModelConfig config = named_config("tiny");
  const LlamaModel model(config, random_weights(config, 3, at::kFloat, gpu));
  SchedulerOptions o = test::static_rows(2);
  o.prefix_block = 4;
  o.prefix_cache_bytes = 16 << 20;
  Scheduler engine(model, o);
  engine.warm_up();
  std::vector<int64_t> head(20);
  std::iota(head.begin(), head.end(), 8);
  for (int64_t i = 0; i < 6; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    r.prompt = head;
    r.prompt.insert(r.prompt.end(), {40 + i, 60 + i});
    r.max_new_tokens = 4;
    r.stop = std::vector<int64_t>{};
    engine.submit(std::move(r));
  }
  for (int step = 0; step < 200 && !engine.idle(); ++step) {
    OpCounter counter(gpu);
    engine.step();
    INFO("step " << step);
    CHECK(counter.host_copies() == 1);
    CHECK(counter.syncs() == 0);
  }
  CHECK(engine.take_finished().size() == 6);
  CHECK(engine.stats().prefix_hits >= 4);
}

TEST_CASE("on CUDA, one captured pick serves rows whose settings change, never recapturing",
          "[cuda][sampling]") {
  // Note [sampling head]: pick_all in a GraphRunner step is captured once
  // per batch bucket; a row's new settings are copies into the head's
  // tables, which every replay reads.
  const at::Device gpu(at::kCUDA, 0);
  const int64_t rows = 4, vocab = 2048;
  SamplingHead graphed = head_on(gpu, rows, vocab), eager = head_on(gpu, rows, vocab);
  GraphRunner::Options ro;
  ro.device = gpu;
  ro.batch_buckets = ShapeBuckets::of({rows});
  GraphRunner runner(
      {{"logits", at::kFloat, {vocab}, 0.0}, {"takes", at::kLong, {}, 0}},
      [&](const std::vector<at::Tensor>& in, const GraphKey&) {
        graphed.pick_all(in[0].select(1, 0), in[1].select(1, 0));
        return std::vector<at::Tensor>{in[1]};
      },
      ro);
  at::manual_seed(1);
  const std::vector<bool> takes(static_cast<size_t>(rows), true);
  const at::Tensor take_ids = at::ones({rows, 1}, at::kLong).to(gpu);
  int64_t same = 0, total = 0;
  for (int step = 0; step < 40; ++step) {
    if (step % 10 == 0) {
      // New settings for every row: greedy and sampled, filters and penalties.
      for (int64_t r = 0; r < rows; ++r) {
        Sampling s;
        s.temperature = (r + step / 10) % 2 == 0 ? 0.0 : 0.9;
        s.top_p = s.temperature > 0 && r == 1 ? 0.9 : 1.0;
        s.presence_penalty = r == 2 ? 0.5 : 0.0;
        s.seed = static_cast<uint64_t>(step + r);
        graphed.set_row(r, s, {1, 2}, {});
        eager.set_row(r, s, {1, 2}, {});
      }
    }
    const at::Tensor logits = at::randn({rows, vocab}).to(gpu);
    runner.run({logits.unsqueeze(1), take_ids});
    eager.pick(logits, takes);
    const auto a = graphed.fetch(rows), b = eager.fetch(rows);
    for (size_t r = 0; r < a.size(); ++r) same += a[r].token == b[r].token, ++total;
  }
  CHECK(runner.stats().captures == 1);
  CHECK(runner.stats().failed_captures == 0);
  CHECK(same == total);
}

TEST_CASE("on CUDA, the head picks inside the captured step what it picks after the replay",
          "[cuda][sampling][serving]") {
  // Note [sampling head]: with graphs the head_in_step default puts pick_all
  // in the prefill and decode graphs; one capture per key serves every mix
  // of settings as rows come and go.
  const at::Device gpu(at::kCUDA, 0);
  const ModelConfig config = named_config("tiny");
  const LlamaModel model(config, random_weights(config, 3, at::kFloat, gpu));
  RunnerStats inside;
  const std::vector<Completion> graphed = test::serve_mixed_sampling(model, std::nullopt, &inside);
  const std::vector<Completion> after = test::serve_mixed_sampling(model, false);
  CHECK(inside.failed_captures == 0);
  CHECK(inside.replays > 0);
  test::require_same_completions(graphed, after);
}

TEST_CASE("on CUDA, verification runs inside the captured verification step",
          "[cuda][sampling][speculative]") {
  // Note [sampling head]: with graphs the head_in_step default puts
  // verify_all in the verification graph, a draft model's q riding in as
  // an input; it accepts and draws what verify() after the replay does.
  const at::Device gpu(at::kCUDA, 0);
  const ModelConfig config = named_config("tiny");
  const LlamaModel model(config, random_weights(config, 3, at::kFloat, gpu));
  const LlamaModel draft(config, random_weights(config, 9, at::kFloat, gpu));
  for (const LlamaModel* drafting : {static_cast<const LlamaModel*>(nullptr), &draft}) {
    INFO((drafting ? "a draft model" : "prompt lookup"));
    SchedulerStats stats;
    const auto after = test::serve_speculation(model, drafting, false);
    const auto graphed = test::serve_speculation(model, drafting, std::nullopt, &stats);
    CHECK(stats.verify_runner.failed_captures == 0);
    CHECK(stats.verify_runner.replays > 0);
    REQUIRE(after.size() == 4u);
    CHECK(graphed == after);
  }
}

TEST_CASE(
    "on CUDA, greedy rows on the grid pick at::argmax with log_softmax's log-probabilities, "
    "beside rows that are not",
    "[cuda][sampling][pick_grid]") {
  // pick_grid.hpp: a plain greedy row is split over many blocks and merged
  // by the last; a sampled or penalized row in the same pick takes one
  // block. Odd and aligned vocabularies, batch 1 and 16, ties included.
  const at::Device gpu(at::kCUDA, 0);
  at::manual_seed(5);
  for (int64_t vocab : {50257, 128256}) {
    for (int64_t rows : {1, 16}) {
      SamplingHead head = head_on(gpu, rows, vocab);
      for (int64_t r = 0; r < rows; ++r) {
        Sampling s;
        s.logprobs = 2;
        if (r % 4 == 3) s.temperature = 0.7, s.seed = static_cast<uint64_t>(r);  // off the grid
        if (r % 4 == 2) s.presence_penalty = 0.5;                                // off the grid
        head.set_row(r, s, {}, {});
      }
      for (int step = 0; step < 3; ++step) {
        at::Tensor logits = at::randn({rows, vocab}).mul_(3);
        logits.select(1, vocab - 2).fill_(15);  // a tie at the top, lower index wins
        logits.select(1, 17).fill_(15);
        head.pick_all(logits.to(gpu),
                      at::ones({rows}, at::TensorOptions().dtype(at::kLong).device(gpu)));
        const std::vector<Picked> got = head.fetch(rows);
        const at::Tensor lp = logits.log_softmax(1);
        for (int64_t r = 0; r < rows; ++r) {
          if (r % 4 >= 2) continue;  // those rows are the other tests' (their own rules)
          INFO("vocab " << vocab << ", rows " << rows << ", row " << r << ", step " << step);
          CHECK(got[static_cast<size_t>(r)].token == 17);
          CHECK(std::abs(got[static_cast<size_t>(r)].logprob.logprob - lp[r][17].item<float>()) <=
                1e-4);
        }
      }
    }
  }
}
