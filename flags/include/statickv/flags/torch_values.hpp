#pragma once
// What statickv's programs read from flags into LibTorch's types (devices,
// dtypes, threads) and how they report errors: the torch half of
// statickv_flags (flags/src/torch_values.cpp), on top of the torch-free
// parser (parser.hpp).

#include <statickv/flags/parser.hpp>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace statickv::flags {

/// "auto" (CUDA when available), "cpu" or "cuda".
at::Device parse_device(const std::string& text, const std::string& flag = "--device");

/// "fp32"/"float32", "fp16"/"float16", "bf16"/"bfloat16"; "" picks the
/// default: fp32 on the CPU, `on_cuda` on a CUDA device.
at::ScalarType parse_dtype(const std::string& text, const at::Device& device,
                           at::ScalarType on_cuda = at::kBFloat16,
                           const std::string& flag = "--dtype");

/// "fp32", "fp16", "bf16" (else LibTorch's name).
std::string dtype_name(at::ScalarType dtype);

/// --dtype: fp32, fp16 or bf16 ("" = fp32 on the CPU, `on_cuda` on CUDA).
void add_dtype(Flags& flags, std::string* target, at::ScalarType on_cuda);

/// Applies --threads (0 leaves LibTorch's own choice).
void set_threads(int threads);

/// For main's catch (...): prints "program: what went wrong" (a c10::Error
/// without its C++ backtrace) to stderr and returns exit status 2.
int fail(const char* program);

}  // namespace statickv::flags
