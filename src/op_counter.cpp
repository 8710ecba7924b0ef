// OpCounter's callbacks (include/statickv/op_counter.hpp; Note [counted
// step], docs/design.md).
//
// Compiled with NDEBUG whatever the build: RecordFunction has a member only
// without NDEBUG (inputs_valid_), and LibTorch is built with it, so a debug
// translation unit reading RecordFunction::inputs() would read a member the
// library's objects do not have. This file reads inputs(), so it sees the
// class as LibTorch does.
#ifndef NDEBUG
#define NDEBUG
#endif

#include <statickv/op_counter.hpp>

#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <string>
#include <unordered_map>

namespace statickv {

namespace detail {

namespace {

/// How the counter treats one operator, by name and schema; a user scope
/// is a region, never a launch.
enum class OpKind { kWork, kLeftOut, kComposite, kRegion };

bool is_alloc_or_metadata(const std::string& name) {
  // Allocations, then metadata: results that are views in all but schema
  // (_unsafe_view, _reshape_alias), in-place restriding, queries.
  static const char* const kNames[] = {
      "aten::empty",
      "aten::empty_like",
      "aten::empty_strided",
      "aten::new_empty",
      "aten::new_empty_strided",
      "aten::resize_",
      "aten::resize_as_",
      "aten::set_",
      "aten::_unsafe_view",
      "aten::_reshape_alias",
      "aten::as_strided_",
      "aten::squeeze_",
      "aten::unsqueeze_",
      "aten::transpose_",
      "aten::t_",
      "aten::detach_",
      "aten::lift_fresh",
      "aten::result_type",
      "aten::size",
      "aten::stride",
      "aten::is_same_size",
      "aten::dim",
      "aten::numel",
      "aten::sym_size",
      "aten::sym_numel",
  };
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

/// A view: the first result aliases an input without writing it.
bool is_view_schema(const c10::FunctionSchema& schema) {
  if (schema.returns().empty()) return false;
  const c10::AliasInfo* alias = schema.returns()[0].alias_info();
  return alias != nullptr && !alias->isWrite();
}

OpKind classify(const at::RecordFunction& fn) {
  if (fn.scope() == at::RecordScope::USER_SCOPE) return OpKind::kRegion;
  // Keyed by overload too: one name can be a kernel in one overload and a
  // composite in another (aten::where.self, aten::where.ScalarOther), and
  // whichever came first must not decide for the other.
  static thread_local std::unordered_map<std::string, OpKind> known;
  const std::string name = fn.name();
  const auto op_name = fn.operator_name();
  const std::string key = op_name ? name + "." + op_name->overload_name : name;
  if (auto it = known.find(key); it != known.end()) return it->second;
  OpKind kind = OpKind::kWork;  // statickv's kernels and unknown names do work
  if (is_alloc_or_metadata(name)) {
    kind = OpKind::kLeftOut;
  } else if (op_name) {
    if (const auto op = c10::Dispatcher::singleton().findOp(*op_name)) {
      const bool composite =
          op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
          !op->hasKernelForDispatchKey(c10::DispatchKey::CPU) &&
          !op->hasKernelForDispatchKey(c10::DispatchKey::CUDA);
      if (is_view_schema(op->schema())) {
        kind = OpKind::kLeftOut;
      } else if (composite) {
        kind = OpKind::kComposite;
      }
    }
  }
  known.emplace(key, kind);
  return kind;
}

bool named_sync(const std::string& name) {
  static const char* const kNames[] = {"aten::item",
                                       "aten::_local_scalar_dense",
                                       "aten::nonzero",
                                       "aten::masked_select",
                                       "aten::equal",
                                       "aten::is_nonzero",
                                       "aten::unique_dim",
                                       "aten::unique_consecutive",
                                       "aten::_unique",
                                       "aten::_unique2",
                                       "aten::unique_dim_consecutive"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

bool first_tensor_on_host(c10::ArrayRef<c10::IValue> inputs) {
  for (const c10::IValue& v : inputs) {
    if (v.isTensor()) return v.toTensor().defined() && v.toTensor().is_cpu();
  }
  return true;
}

/// repeat_interleave whose output size is left to the data (no
/// output_size: the host reads the repeats to size the result).
bool repeat_without_size(const std::string& name, c10::ArrayRef<c10::IValue> inputs) {
  if (name != "aten::repeat_interleave" || inputs.size() < 2 || !inputs.back().isNone()) {
    return false;
  }
  // repeat_interleave(repeats, output_size) or (self, repeats, dim,
  // output_size) with repeats a tensor; (self, int repeats, ...) sizes
  // its result from the int.
  return inputs.size() == 2 ? inputs[0].isTensor() : inputs[1].isTensor();
}

/// A copy to the CPU: to/_to_copy with a CPU device argument (from another
/// device, or any on the CPU proxy), copy_ into a CPU tensor from another
/// device.
bool host_copy(const std::string& name, c10::ArrayRef<c10::IValue> inputs, bool proxy) {
  if (inputs.empty() || !inputs[0].isTensor()) return false;
  const bool self_on_host = inputs[0].toTensor().is_cpu();
  if (name == "aten::to" || name == "aten::_to_copy") {  // to(self, ..., device, ...)
    for (size_t i = 1; i < inputs.size(); ++i) {
      const bool to_host = (inputs[i].isDevice() && inputs[i].toDevice().is_cpu()) ||
                           (inputs[i].isTensor() && inputs[i].toTensor().is_cpu());
      if (to_host) return proxy || !self_on_host;
    }
    return false;
  }
  if (name == "aten::copy_" && inputs.size() >= 2 && inputs[1].isTensor()) {
    return self_on_host && !inputs[1].toTensor().is_cpu();  // copy_(self = dst, src)
  }
  return false;
}

}  // namespace

/// One open operator on this thread's call stack.
struct OpFrame : at::ObserverContext {
  std::string name;
  std::string region;  // the innermost open user scope
  OpKind kind = OpKind::kWork;
  bool counted_below = false;  // a launch was counted inside it
  bool in_transfer = false;    // it or a caller is a host copy or sync
};

namespace {

CounterState*& counter_state() {
  static thread_local CounterState* state = nullptr;
  return state;
}

std::unique_ptr<at::ObserverContext> enter_op(const at::RecordFunction& fn) {
  CounterState* s = counter_state();
  if (s == nullptr) return nullptr;
  auto frame = std::make_unique<OpFrame>();
  frame->name = fn.name();
  frame->kind = classify(fn);
  const OpFrame* parent = s->stack.empty() ? nullptr : s->stack.back();
  const bool outer_transfer = parent != nullptr && parent->in_transfer;
  frame->in_transfer = outer_transfer;
  frame->region = frame->kind == OpKind::kRegion ? frame->name
                  : parent != nullptr            ? parent->region
                                                 : std::string();
  if (!outer_transfer) {
    const c10::ArrayRef<c10::IValue> inputs = fn.inputs();
    const bool host_read = !s->proxy && first_tensor_on_host(inputs);
    if ((named_sync(frame->name) && !host_read) || repeat_without_size(frame->name, inputs)) {
      ++s->counts.syncs;
      ++s->counts.synced[frame->name];
      frame->in_transfer = true;
    } else if (host_copy(frame->name, inputs, s->proxy)) {
      ++s->counts.host_copies;
      ++s->counts.copies[frame->name];
      frame->in_transfer = true;
    }
  }
  s->stack.push_back(frame.get());
  return frame;
}

void exit_op(const at::RecordFunction&, at::ObserverContext* ctx) {
  CounterState* s = counter_state();
  if (s == nullptr || ctx == nullptr || s->stack.empty()) return;
  auto* frame = static_cast<OpFrame*>(ctx);
  s->stack.pop_back();
  bool counted = frame->counted_below;
  if (frame->kind == OpKind::kLeftOut) {
    ++s->counts.left_out[frame->name];
  } else if (!counted && frame->kind == OpKind::kWork) {
    ++s->counts.launches;
    ++s->counts.launched[frame->region][frame->name];
    counted = true;
  }
  if (counted && !s->stack.empty()) s->stack.back()->counted_below = true;
}

}  // namespace

}  // namespace detail

OpCounter::OpCounter(at::Device device) {
  TORCH_CHECK(detail::counter_state() == nullptr,
              "OpCounter: expected one counter per thread but one is already counting");
  state_.proxy = device.is_cpu();
  detail::counter_state() = &state_;
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&detail::enter_op, &detail::exit_op)
          .needsInputs(true)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
}

OpCounter::~OpCounter() {
  at::removeCallback(handle_);
  detail::counter_state() = nullptr;
}

}  // namespace statickv
