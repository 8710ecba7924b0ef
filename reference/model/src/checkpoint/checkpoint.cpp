// Checkpoint directories: one safetensors file or shards listed by an
// index, every expected parameter found and checked, every tensor the model
// would not read refused (docs/checkpoints.md).

#include "json_fields.hpp"

#include <statickv/model/checkpoint.hpp>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace statickv::reference {

namespace {

using namespace detail;
namespace fs = std::filesystem;

/// Where each tensor of a checkpoint lives.
struct Sources {
  std::vector<std::string> files;               // every safetensors file read
  std::map<std::string, std::string> location;  // tensor name -> file (sharded only)
  std::map<std::string, Weights> tensors;       // file -> its tensors
  std::string index;                            // the index file, when sharded
};

Sources read_sources(const std::string& dir) {
  const fs::path root(dir);
  const std::string single = (root / "model.safetensors").string();
  const std::string index = (root / "model.safetensors.index.json").string();
  Sources sources;
  if (fs::exists(single)) {
    sources.files.push_back(single);
    sources.tensors[single] = read_safetensors(single);
    return sources;
  }
  TORCH_CHECK(fs::exists(index), dir, ": expected model.safetensors or ",
              "model.safetensors.index.json but got neither (missing file ", single, ")");
  sources.index = index;
  const Json json = parse_json_file(index);
  const Json& map = require(index, json, "weight_map", "weight_map");
  TORCH_CHECK(map.is_object(), index, ": expected field \"weight_map\" to be an object but got ",
              map.type_name());
  std::set<std::string> shards;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string shard = as_string(index, it.value(), "weight_map." + it.key());
    const std::string file = (root / shard).string();
    sources.location[it.key()] = file;
    shards.insert(file);
  }
  for (const std::string& file : shards) {
    TORCH_CHECK(fs::exists(file), index, ": expected shard file ", file,
                " named in weight_map but got no such file");
  }
  for (const std::string& file : shards) {
    sources.files.push_back(file);
    sources.tensors[file] = read_safetensors(file);
  }
  return sources;
}

/// The file that holds `name`: the index's choice when sharded.
const std::string& file_of(const Sources& sources, const std::string& name) {
  if (sources.index.empty()) return sources.files.front();
  auto where = sources.location.find(name);
  TORCH_CHECK(where != sources.location.end(), sources.index, ": expected tensor \"", name,
              "\" in weight_map but got none (shards: ", join(sources.files), ")");
  return where->second;
}

/// One expected parameter, checked for presence, shape and a floating dtype.
at::Tensor find_parameter(const Sources& sources, const std::string& name,
                          const std::vector<int64_t>& shape) {
  const std::string& file = file_of(sources, name);
  const Weights& weights = sources.tensors.at(file);
  auto it = weights.find(name);
  TORCH_CHECK(it != weights.end(), file, ": expected tensor \"", name, "\" but got none",
              sources.index.empty() ? "" : " (the file weight_map names for it)");
  const at::Tensor& tensor = it->second;
  TORCH_CHECK(tensor.sizes() == c10::IntArrayRef(shape), file, ": tensor \"", name,
              "\": expected shape ", c10::IntArrayRef(shape), " but got ", tensor.sizes());
  const at::ScalarType type = tensor.scalar_type();
  TORCH_CHECK(
      at::isFloatingType(type), file, ": tensor \"", name,
      "\": expected a floating dtype (F32, F16, BF16, F64) but got ",
      safetensors_dtype_name(type) != nullptr ? safetensors_dtype_name(type) : c10::toString(type));
  return tensor;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Tensors of the checkpoint that the model does not read. A tied
/// lm_head.weight equal to the embedding is read (as the embedding); a tied
/// one that differs is refused whatever the options: the checkpoint
/// contradicts its own config. Rotary inv_freq buffers are derived, not
/// weights.
void check_unused(const std::string& dir, const Sources& sources,
                  const std::vector<DiskTensor>& expected, const ModelConfig& config,
                  const LoadOptions& options) {
  std::set<std::string> used;
  for (const DiskTensor& entry : expected) used.insert(entry.name);
  std::vector<std::string> unused;
  for (const auto& [file, weights] : sources.tensors) {
    for (const auto& [name, tensor] : weights) {
      if (used.count(name) != 0 || ends_with(name, "rotary_emb.inv_freq")) continue;
      if (name == kLmHead && config.tie_word_embeddings) {
        const at::Tensor& embed =
            sources.tensors.at(file_of(sources, kEmbedTokens)).at(kEmbedTokens);
        TORCH_CHECK(tensor.sizes() == embed.sizes() && at::equal(tensor, embed.to(tensor.dtype())),
                    file,
                    ": tensor \"lm_head.weight\": expected a copy of "
                    "model.embed_tokens.weight (tie_word_embeddings is true) but got a different "
                    "tensor");
        continue;
      }
      unused.push_back(name);
    }
  }
  TORCH_CHECK(unused.empty() || options.allow_unused_tensors, dir,
              ": expected only tensors the model reads but got ", unused.size(),
              " it would ignore: ", join(unused),
              " (LoadOptions::allow_unused_tensors accepts them)");
}

/// The model's parameters one stored tensor holds: itself, or row views of
/// a projection fused on disk (disk_tensors).
void add_parameters(Weights& found, const DiskTensor& stored, const at::Tensor& tensor) {
  if (stored.parts.empty()) {
    found[stored.name] = tensor;
    return;
  }
  int64_t row = 0;
  for (const auto& [name, rows] : stored.parts) {
    found[name] = tensor.narrow(0, row, rows);
    row += rows;
  }
}

}  // namespace

Checkpoint load_checkpoint(const std::string& dir, at::ScalarType dtype, at::Device device,
                           const LoadOptions& options) {
  TORCH_CHECK(at::isFloatingType(dtype), "dtype: expected a floating dtype but got ", dtype);
  Checkpoint checkpoint;
  checkpoint.config = load_config((fs::path(dir) / "config.json").string());
  const fs::path generation = fs::path(dir) / "generation_config.json";
  if (fs::exists(generation)) {
    checkpoint.config.eos_token_ids =
        load_generation_eos(generation.string(), checkpoint.config.eos_token_ids);
  }
  const Sources sources = read_sources(dir);
  // Every check first; conversion (which may allocate a lot) only after.
  const std::vector<DiskTensor> expected = disk_tensors(checkpoint.config);
  Weights found;
  for (const DiskTensor& stored : expected) {
    add_parameters(found, stored, find_parameter(sources, stored.name, stored.shape));
  }
  check_unused(dir, sources, expected, checkpoint.config, options);
  // Only this rank's slices (views of the memory map) go on to be converted.
  const TpPlan plan = plan_tensor_parallel(checkpoint.config, options.tp);
  for (auto& [name, tensor] : shard_weights(checkpoint.config, plan, std::move(found))) {
    const bool in_place = device.is_cpu() && tensor.scalar_type() == dtype;
    checkpoint.weights[name] = (in_place ? tensor : tensor.to(device, dtype)).contiguous();
  }
  return checkpoint;
}

}  // namespace statickv::reference
