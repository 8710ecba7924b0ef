// OpCounter (include/statickv/op_counter.hpp; Note [counted step],
// docs/design.md): its three tallies and their per-name maps, counting only
// this thread while the counter lives, reset(), the device that decides what
// is a copy to the host or a sync, and OpCounts::launches_in by region. What
// counts as a launch operator by operator (views, composites, overloads, every
// sync by name): tests/engine/test_step_count.cpp.

#include "support.hpp"

#include <statickv/op_counter.hpp>

#include <ATen/record_function.h>

#include <thread>

using namespace statickv;
using namespace statickv::test;

TEST_CASE("OpCounter tallies this thread's launches, host copies and syncs while it lives",
          "[op_counter]") {
  c10::InferenceMode inference;
  const at::Tensor x = at::arange(6, f32());
  (void)x.add(1);  // before the counter: not counted
  OpCounter ops;
  CHECK(ops.launches() == 0);
  CHECK(ops.host_copies() == 0);
  CHECK(ops.syncs() == 0);
  // Tensor operands: with a number, the leaf the CPU records is the
  // number's wrapping, not the add.
  (void)x.add(x);
  (void)x.mul(x);
  std::thread([&] { (void)x.neg(); }).join();  // another thread's work
  CHECK(ops.launches() == 2);
  CHECK(ops.counts().launches == 2);
  CHECK(ops.counts().launched.at("").at("aten::add") == 1);
  CHECK(ops.counts().launched.at("").count("aten::neg") == 0);
  (void)x.cpu();  // the CPU proxy: a to() with a CPU device is the step's copy out
  CHECK(ops.host_copies() == 1);
  CHECK(ops.counts().host_copies == 1);
  CHECK(ops.counts().copies.at("aten::to") == 1);
  (void)x.sum().item<float>();
  CHECK(ops.syncs() == 1);
  CHECK(ops.counts().syncs == 1);
  CHECK(ops.counts().synced.at("aten::item") == 1);
  (void)x.view({2, 3});
  CHECK(ops.counts().left_out.at("aten::view") == 1);
}

TEST_CASE("OpCounter reset starts every tally over and keeps counting", "[op_counter]") {
  c10::InferenceMode inference;
  const at::Tensor x = at::arange(6, f32());
  OpCounter ops;
  (void)x.add(1).view({2, 3});
  (void)x.cpu();
  (void)x.sum().item<float>();
  REQUIRE(ops.launches() > 0);
  ops.reset();
  CHECK(ops.launches() == 0);
  CHECK(ops.host_copies() == 0);
  CHECK(ops.syncs() == 0);
  CHECK(ops.counts().launched.empty());
  CHECK(ops.counts().copies.empty());
  CHECK(ops.counts().synced.empty());
  CHECK(ops.counts().left_out.empty());
  (void)x.mul(x);  // the callback stays
  CHECK(ops.launches() == 1);
  CHECK(ops.counts().launched.at("").at("aten::mul") == 1);
}

TEST_CASE("OpCounter's device decides what is a copy to the host or a sync", "[op_counter]") {
  c10::InferenceMode inference;
  const at::Tensor x = at::arange(6, f32());
  {
    OpCounter proxy;  // the CPU: every tensor stands for a device tensor
    (void)x.to(at::kCPU);
    (void)x.sum().item<float>();
    CHECK(proxy.host_copies() == 1);
    CHECK(proxy.syncs() == 1);
  }
  {
    OpCounter gpu_step(at::Device(at::kCUDA));  // host tensors are on the host already
    (void)x.to(at::kCPU);
    (void)x.sum().item<float>();
    CHECK(gpu_step.host_copies() == 0);
    CHECK(gpu_step.syncs() == 0);
    CHECK(gpu_step.launches() >= 1);  // the sum
  }
  // One counter per thread at a time: a second is refused while one lives,
  // and a new one may start once it is gone.
  {
    OpCounter first;
    require_error([] { OpCounter second; }, {"one counter per thread"});
  }
  CHECK_NOTHROW(OpCounter());
}

TEST_CASE("OpCounts launches_in sums the launches of one region, the innermost user scope",
          "[op_counter]") {
  OpCounts counts;
  counts.launched["statickv::layer"] = {{"aten::add", 2}, {"aten::mm", 3}};
  counts.launched[""] = {{"aten::neg", 1}};
  CHECK(counts.launches_in("statickv::layer") == 5);
  CHECK(counts.launches_in("") == 1);
  CHECK(counts.launches_in("absent") == 0);

  c10::InferenceMode inference;
  const at::Tensor x = at::arange(6, f32());
  OpCounter ops;
  {
    RECORD_USER_SCOPE("statickv::layer");
    (void)x.add(1);
    (void)x.mul(2);
    {
      RECORD_USER_SCOPE("inner");
      (void)x.neg();
    }
  }
  (void)x.sub(1);
  CHECK(ops.counts().launches_in("statickv::layer") == 2);
  CHECK(ops.counts().launches_in("inner") == 1);
  CHECK(ops.counts().launches_in("") == 1);
  CHECK(ops.counts().launches_in("absent") == 0);
  CHECK(ops.launches() == 4);  // a region is no launch
}
