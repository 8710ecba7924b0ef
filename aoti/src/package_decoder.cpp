#include <statickv/aoti/fingerprint.hpp>
#include <statickv/aoti/package_decoder.hpp>
#include <statickv/detail/checks.hpp>

#include <ops.hpp>

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <filesystem>

namespace statickv::aoti {

PackageDecoder::PackageDecoder(const std::string& package, Cache& cache)
    : path_(package), cache_(&cache) {
  ops::check_registered();
  // The package reads and writes the buffers themselves (statickv::cache_write
  // into device keys and values in the cache dtype): plain storage on the
  // device, neither quantized nor offloaded.
  TORCH_CHECK(cache.config().plain_storage() && !cache.config().host_offload,
              "cache: expected kv_storage=compute and host_offload=0 for an AOTInductor package "
              "(it reads and writes the buffers itself) but got kv_storage=",
              to_string(cache.config().kv_storage), " host_offload=", cache.config().host_offload);
  TORCH_CHECK(std::filesystem::is_regular_file(package), "AOTInductor package ", package,
              ": no such file (build it with examples/aoti/export.py)");
  // The metadata is read from the archive alone, so a package for another
  // cache is refused before its model library is even loaded.
  const auto metadata =
      torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(package, "model");
  check_fingerprint(metadata, cache.config(), package);
  max_query_ = metadata_int(metadata, "statickv.max_query", package);
  vocab_ = metadata_int(metadata, "statickv.vocab_size", package);
  for (LayerType type : {LayerType::kFull, LayerType::kSliding}) {
    for (int64_t l = 0; l < cache.num_layers(); ++l) {
      if (cache.config().layer_type(l) != type) continue;
      group_layers_.push_back(l);
      break;
    }
  }
  const c10::DeviceIndex index =
      cache.config().device.is_cuda() ? cache.config().device.index() : -1;
  loader_ =
      std::make_unique<torch::inductor::AOTIModelPackageLoader>(package, "model", false, 1, index);
}

PackageDecoder::~PackageDecoder() = default;

void PackageDecoder::check_step(const at::Tensor& ids, const at::Tensor& positions) const {
  const CacheConfig& config = cache_->config();
  detail::check_tensor("ids", ids, at::kLong, config.device);
  detail::check_tensor("positions", positions, at::kLong, config.device);
  detail::check_rank("ids", ids, 2, "[b, q]");
  TORCH_CHECK(positions.sizes() == ids.sizes(), "positions: expected the shape of ids ",
              ids.sizes(), " but got ", positions.sizes(), " (the package takes per-row [b, q])");
  TORCH_CHECK(ids.size(0) >= 1 && ids.size(0) <= config.max_batch,
              "ids: expected 1 <= b <= ", "max_batch=", config.max_batch, " rows but got ",
              ids.size(0));
  TORCH_CHECK(ids.size(1) >= 1 && ids.size(1) <= max_query_,
              "ids: expected 1 <= q <= ", "the package's max_query=", max_query_,
              " tokens but got ", ids.size(1), " (", path_, ")");
}

at::Tensor PackageDecoder::forward(const at::Tensor& ids, const at::Tensor& positions,
                                   int64_t attend_len) {
  check_step(ids, positions);
  const StepPlan plan = cache_->prepare(positions, ids.size(0), attend_len);
  // The flat input list of kInputs, in the decoder's pytree order.
  std::vector<at::Tensor> inputs = {ids.contiguous(), positions.contiguous()};
  for (int64_t l : group_layers_) inputs.push_back(plan.write_slots(l).contiguous());
  for (int64_t l : group_layers_) inputs.push_back(plan.additive_mask(l).contiguous());
  for (int64_t l = 0; l < cache_->num_layers(); ++l) inputs.push_back(cache_->keys(l));
  for (int64_t l = 0; l < cache_->num_layers(); ++l) inputs.push_back(cache_->values(l));
  std::vector<at::Tensor> outputs = loader_->run(inputs);
  TORCH_CHECK(outputs.size() == 1, "AOTInductor package ", path_,
              ": expected one output (logits) but got ", outputs.size());
  return outputs[0];
}

}  // namespace statickv::aoti
