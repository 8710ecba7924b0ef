// make_trace (trace.hpp): a seed gives one trace, on every platform; the
// trace has the shape its options describe (count, ranges, arrivals that
// never go back, everything at time 0 without a rate); bad options are
// refused naming the field. Serving traces is test_scheduler.cpp's.

#include "support.hpp"

#include <statickv/engine/trace.hpp>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

namespace {

TraceOptions small_trace(uint64_t seed) {
  TraceOptions o;
  o.requests = 300;
  o.rate = 4.0;
  o.min_prompt = 2, o.max_prompt = 40;
  o.min_new_tokens = 3, o.max_new_tokens = 20;
  o.vocab_size = 50;
  o.seed = seed;
  return o;
}

bool same_trace(const std::vector<TraceRequest>& a, const std::vector<TraceRequest>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].arrival != b[i].arrival || a[i].prompt != b[i].prompt ||
        a[i].max_new_tokens != b[i].max_new_tokens) {
      return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("a trace is a function of its options: the same seed the same trace, another another",
          "[trace]") {
  const std::vector<TraceRequest> a = make_trace(small_trace(7));
  CHECK(same_trace(a, make_trace(small_trace(7))));
  CHECK_FALSE(same_trace(a, make_trace(small_trace(8))));
  // Its own arithmetic over std::mt19937_64, no std::*_distribution: these
  // values hold on every platform.
  REQUIRE(a.size() >= 2u);
  CHECK(a[0].arrival == Approx(0.35099781199702945).epsilon(1e-12));
  CHECK(a[0].prompt.size() == 35u);
  CHECK(a[0].max_new_tokens == 5);
  CHECK(a[1].arrival == Approx(0.39495686998227875).epsilon(1e-12));
  CHECK(a[1].prompt == std::vector<int64_t>{35, 20, 49, 29, 44, 7,  12, 15, 24, 47, 38,
                                            19, 14, 29, 2,  24, 40, 0,  34, 30, 9});
  CHECK(a[1].max_new_tokens == 13);
  // A shorter trace of the same seed is the longer one's start.
  TraceOptions one = small_trace(7);
  one.requests = 1;
  const std::vector<TraceRequest> first = make_trace(one);
  REQUIRE(first.size() == 1u);
  CHECK(first[0].prompt == a[0].prompt);
  CHECK(first[0].arrival == a[0].arrival);
}

TEST_CASE("a trace has the requests, ranges and arrival order its options describe", "[trace]") {
  const TraceOptions o = small_trace(3);
  const std::vector<TraceRequest> trace = make_trace(o);
  REQUIRE(trace.size() == 300u);
  int64_t short_prompts = 0, long_prompts = 0;
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceRequest& r = trace[i];
    const auto len = static_cast<int64_t>(r.prompt.size());
    CHECK(len >= o.min_prompt);
    CHECK(len <= o.max_prompt);
    CHECK(r.max_new_tokens >= o.min_new_tokens);
    CHECK(r.max_new_tokens <= o.max_new_tokens);
    for (int64_t id : r.prompt) CHECK((id >= 0 && id < o.vocab_size));
    CHECK(r.arrival >= 0.0);
    if (i > 0) CHECK(r.arrival >= trace[i - 1].arrival);
    short_prompts += len <= 9 ? 1 : 0;  // log-uniform over [2, 40]: half below sqrt(2 * 41)
    long_prompts += len >= 30 ? 1 : 0;
  }
  // Log-uniform: many short prompts, a few long ones (P(len >= 30) is about 0.11).
  CHECK(short_prompts > 100);
  CHECK(long_prompts > 10);
  CHECK(long_prompts < short_prompts);
  // Poisson arrivals at rate 4: the last of 300 near 300 / 4 = 75.
  CHECK(trace.back().arrival > 50.0);
  CHECK(trace.back().arrival < 100.0);
}

TEST_CASE("a trace without a rate has every request at time 0, and none without requests",
          "[trace]") {
  TraceOptions o = small_trace(5);
  o.rate = 0.0;
  o.min_prompt = o.max_prompt = 6;
  for (const TraceRequest& r : make_trace(o)) {
    CHECK(r.arrival == 0.0);
    CHECK(r.prompt.size() == 6u);
  }
  o.requests = 0;
  CHECK(make_trace(o).empty());
}

TEST_CASE("make_trace refuses impossible options, naming the field", "[trace][errors]") {
  TraceOptions o = small_trace(1);
  o.requests = -1;
  require_error([&] { make_trace(o); }, {"requests", ">= 0", "-1"});
  o = small_trace(1);
  o.rate = -2.0;
  require_error([&] { make_trace(o); }, {"rate", ">= 0"});
  o = small_trace(1);
  o.min_prompt = 0;
  require_error([&] { make_trace(o); }, {"min_prompt", ">= 1"});
  o = small_trace(1);
  o.max_prompt = 1;
  require_error([&] { make_trace(o); }, {"max_prompt", "min_prompt=2"});
  o = small_trace(1);
  o.max_new_tokens = 2;
  require_error([&] { make_trace(o); }, {"max_new_tokens", "min_new_tokens=3"});
  o = small_trace(1);
  o.vocab_size = 0;
  require_error([&] { make_trace(o); }, {"vocab_size", ">= 1"});
}
