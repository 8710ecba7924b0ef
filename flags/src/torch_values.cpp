// Devices, dtypes, threads and error reports of statickv's programs
// (flags/include/statickv/flags/torch_values.hpp).

#include <statickv/flags/torch_values.hpp>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <cstdio>
#include <exception>

namespace statickv::flags {

at::Device parse_device(const std::string& text, const std::string& flag) {
  if (text == "auto") return torch::cuda::is_available() ? at::Device(at::kCUDA, 0) : at::kCPU;
  if (text == "cpu") return at::kCPU;
  if (text == "cuda") {
    if (!torch::cuda::is_available()) {
      throw FlagError(flag + ": expected auto or cpu (no CUDA device is available) but got cuda");
    }
    return at::Device(at::kCUDA, 0);
  }
  throw FlagError(flag + ": expected auto, cpu or cuda but got '" + text + "'");
}

at::ScalarType parse_dtype(const std::string& text, const at::Device& device,
                           at::ScalarType on_cuda, const std::string& flag) {
  if (text.empty()) return device.is_cuda() ? on_cuda : at::kFloat;
  if (text == "fp32" || text == "float32") return at::kFloat;
  if (text == "fp16" || text == "float16") return at::kHalf;
  if (text == "bf16" || text == "bfloat16") return at::kBFloat16;
  throw FlagError(flag + ": expected fp32, fp16 or bf16 but got '" + text + "'");
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "fp32";
    case at::kHalf:
      return "fp16";
    case at::kBFloat16:
      return "bf16";
    default:
      return c10::toString(dtype);
  }
}

void add_dtype(Flags& flags, std::string* target, at::ScalarType on_cuda) {
  flags.add_choice("--dtype T", target, {"fp32", "fp16", "bf16", "float32", "float16", "bfloat16"},
                   "fp32, fp16 or bf16 (default fp32 on cpu, " + dtype_name(on_cuda) + " on cuda)");
}

void set_threads(int threads) {
  if (threads > 0) at::set_num_threads(threads);
}

int fail(const char* program) {
  try {
    throw;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: unknown error\n", program);
  }
  return 2;
}

}  // namespace statickv::flags
