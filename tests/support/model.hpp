#pragma once
// Test support for the reference decoder's model: a named shape with
// random weights, the model most engine and model tests decode with.

#include <statickv/model/checkpoint.hpp>
#include <statickv/model/model.hpp>

#include <cstdint>
#include <string>

namespace statickv::test {

/// named_config(shape) on the CPU with random_weights(seed, dtype); `eos`
/// >= 0 replaces the shape's eos ids with that one id.
inline reference::LlamaModel random_model(const std::string& shape, uint64_t seed,
                                          at::ScalarType dtype = at::kFloat, int64_t eos = -1) {
  reference::ModelConfig config = reference::named_config(shape);
  if (eos >= 0) config.eos_token_ids = {eos};
  return reference::LlamaModel(
      config, reference::random_weights(config, seed, dtype, at::Device(at::kCPU)));
}

}  // namespace statickv::test
