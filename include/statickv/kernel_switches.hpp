#pragma once
// Note [kernel switches] (docs/design.md): every device kernel or device
// path statickv owns has a name, and a process can switch any of them off
// with STATICKV_DISABLE_KERNELS=name,name,... Off, the caller takes the
// path the kernel replaced (the same math in LibTorch ops), so a kernel
// that fails its first test on a new GPU costs a benchmark its speed, not
// its run. The GPU run tests each kernel first and switches off those that
// fail; the benchmarks print what was off.

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace statickv {

/// The switchable kernels: each name, and what runs when it is off.
inline const std::vector<std::string>& kernel_names() {
  static const std::vector<std::string> names = {
      "rotary_write",  // fused path's rotary + cache write (CUDA) -> apply_rotary, then update()
      "sample_pick",   // the sampling head's fused pick (CUDA) -> its tensor composition
      "pick_grid",     // the fused CUDA pick's greedy rows over many blocks -> one block a row
      "fp32_logits",   // fused path's LM head straight to float32 (CUDA) -> GEMM, then a cast
      "act_mul",  // fused path's act(gate) * up (CPU and CUDA) -> the activation, then a multiply
      "decode_prepare",  // prepare() of one query a row (CPU and CUDA) -> its ATen composition
      "cpu_linear",      // fused path's projections of a few rows by the fastest route (CPU) -> the
                         // GEMM
      "decode_attention",  // sdpa_attention of one query a row (CPU) ->
                           // scaled_dot_product_attention
  };
  return names;
}

namespace detail {

// STATICKV_DISABLE_KERNELS, parsed once; an unknown name is refused by
// name when first read, with the known ones.
inline std::vector<std::string> parse_disabled_kernels(const char* text) {
  std::vector<std::string> off;
  std::string item;
  const std::string all = text == nullptr ? "" : text;
  for (size_t i = 0; i <= all.size(); ++i) {
    if (i < all.size() && all[i] != ',') {
      item += all[i];
      continue;
    }
    if (item.empty()) continue;
    const auto& names = kernel_names();
    if (std::find(names.begin(), names.end(), item) == names.end()) {
      std::string known;
      for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
      TORCH_CHECK(false, "STATICKV_DISABLE_KERNELS: expected names among ", known, " but got '",
                  item, "'");
    }
    off.push_back(item);
    item.clear();
  }
  return off;
}

}  // namespace detail

/// The kernels switched off in this process (STATICKV_DISABLE_KERNELS).
inline const std::vector<std::string>& disabled_kernels() {
  static const std::vector<std::string> off =
      detail::parse_disabled_kernels(std::getenv("STATICKV_DISABLE_KERNELS"));
  return off;
}

/// Whether kernel `name` (one of kernel_names()) may run in this process.
inline bool kernel_enabled(const std::string& name) {
  const auto& off = disabled_kernels();
  return std::find(off.begin(), off.end(), name) == off.end();
}

}  // namespace statickv
