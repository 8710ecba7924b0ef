// Prompt-cache files (prompt_cache.hpp): a RowState, its ids and a
// fingerprint, through write_safetensors/read_safetensors.

#include <statickv/model/checkpoint.hpp>
#include <statickv/model/prompt_cache.hpp>

#include <string>
#include <vector>

namespace statickv::reference {

namespace {

const at::TensorOptions kLongs = at::TensorOptions().dtype(at::kLong);

std::string layer_name(int64_t layer, const char* what) {
  return "layer." + std::to_string(layer) + "." + what;
}

// num_layers, num_kv_heads, head_dim, sliding_window, ring capacity.
std::vector<int64_t> config_fingerprint(const CacheConfig& c) {
  const bool sliding = c.has_type(LayerType::kSliding);
  return {c.num_layers, c.num_kv_heads, c.head_dim, sliding ? c.sliding_window : 0,
          sliding ? c.sliding_capacity() : 0};
}

const at::Tensor& tensor(const Weights& tensors, const std::string& path, const std::string& name) {
  const auto it = tensors.find(name);
  TORCH_CHECK(it != tensors.end(), path, ": expected a tensor \"", name,
              "\" (a statickv prompt-cache file) but got none");
  return it->second;
}

std::vector<int64_t> longs(const Weights& tensors, const std::string& path,
                           const std::string& name) {
  const at::Tensor& t = tensor(tensors, path, name);
  TORCH_CHECK(t.scalar_type() == at::kLong && t.dim() == 1, path, ": tensor \"", name,
              "\": expected a 1-D Long tensor but got ", t.scalar_type(), " ", t.sizes());
  const at::Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

void check_fingerprint(const Weights& tensors, const std::string& path, const CacheConfig& config,
                       const std::string& model_id) {
  static const char* const kFields[] = {"num_layers", "num_kv_heads", "head_dim", "sliding_window",
                                        "ring capacity"};
  const std::vector<int64_t> want = config_fingerprint(config);
  const std::vector<int64_t> got = longs(tensors, path, "fingerprint.config");
  TORCH_CHECK(got.size() == want.size(), path, ": fingerprint.config: expected ", want.size(),
              " entries but got ", got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    TORCH_CHECK(got[i] == want[i], path, ": fingerprint ", kFields[i], ": expected ", want[i],
                " (the cache's) but got ", got[i]);
  }
  const std::vector<int64_t> types = longs(tensors, path, "fingerprint.layer_types");
  TORCH_CHECK(static_cast<int64_t>(types.size()) == config.num_layers, path,
              ": fingerprint.layer_types: expected num_layers=", config.num_layers,
              " entries but got ", types.size());
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const int64_t expected = config.layer_type(l) == LayerType::kSliding ? 1 : 0;
    TORCH_CHECK(types[static_cast<size_t>(l)] == expected, path, ": fingerprint layer_types[", l,
                "]: expected ", config.layer_type(l), " but got ",
                types[static_cast<size_t>(l)] == 1 ? "sliding" : "full");
  }
  std::string saved_id;
  if (tensors.count("fingerprint.model_id")) {
    const at::Tensor id = tensors.at("fingerprint.model_id").contiguous();
    TORCH_CHECK(id.scalar_type() == at::kByte, path,
                ": tensor \"fingerprint.model_id\": expected UInt8 but got ", id.scalar_type());
    saved_id.assign(reinterpret_cast<const char*>(id.data_ptr<uint8_t>()),
                    static_cast<size_t>(id.numel()));
  }
  TORCH_CHECK(saved_id == model_id, path, ": fingerprint model_id: expected \"", model_id,
              "\" but got \"", saved_id, "\"");
}

// Positions a saved row can hold: a full layer's slot p holds p or -1; a
// ring's slot s holds -1 or a position p < length with p % capacity == s.
void check_positions(const RowState& state, const std::string& path) {
  for (size_t l = 0; l < state.positions.size(); ++l) {
    const at::Tensor pos = state.positions[l].contiguous();
    const int64_t* p = pos.data_ptr<int64_t>();
    const int64_t cap = pos.numel();
    for (int64_t s = 0; s < cap; ++s) {
      const bool ok = p[s] == -1 || (p[s] >= 0 && p[s] < state.length && p[s] % cap == s);
      TORCH_CHECK(ok, path, ": tensor \"", layer_name(static_cast<int64_t>(l), "positions"), "\"[",
                  s, "]: expected -1 or a position < ", state.length, " stored in slot ", s,
                  " but got ", p[s], " (a damaged file)");
    }
  }
}

}  // namespace

void write_prompt_cache(const std::string& path, const Cache& cache, int64_t row,
                        const std::vector<int64_t>& ids, const std::string& model_id) {
  const RowState state = cache.save_row(row);
  TORCH_CHECK(static_cast<int64_t>(ids.size()) == state.length, "ids: expected ", state.length,
              " ids (row ", row, "'s seq_length) but got ", ids.size());
  Weights tensors;
  tensors["ids"] = at::tensor(ids, kLongs);
  tensors["fingerprint.config"] = at::tensor(config_fingerprint(cache.config()), kLongs);
  std::vector<int64_t> types;
  for (const LayerType t : state.types) types.push_back(t == LayerType::kSliding ? 1 : 0);
  tensors["fingerprint.layer_types"] = at::tensor(types, kLongs);
  if (!model_id.empty()) {
    tensors["fingerprint.model_id"] =
        at::tensor(std::vector<uint8_t>(model_id.begin(), model_id.end()),
                   at::TensorOptions().dtype(at::kByte));
  }
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    const auto i = static_cast<size_t>(l);
    tensors[layer_name(l, "positions")] = state.positions[i];
    tensors[layer_name(l, "keys")] = state.keys[i];
    tensors[layer_name(l, "values")] = state.values[i];
  }
  write_safetensors(path, tensors);
}

PromptCache read_prompt_cache(const std::string& path, const CacheConfig& config,
                              const std::string& model_id) {
  const Weights tensors = read_safetensors(path);
  check_fingerprint(tensors, path, config, model_id);
  PromptCache out;
  out.ids = longs(tensors, path, "ids");
  out.state.length = static_cast<int64_t>(out.ids.size());
  for (int64_t l = 0; l < config.num_layers; ++l) {
    out.state.types.push_back(config.layer_type(l));
    out.state.positions.push_back(tensor(tensors, path, layer_name(l, "positions")));
    out.state.keys.push_back(tensor(tensors, path, layer_name(l, "keys")));
    out.state.values.push_back(tensor(tensors, path, layer_name(l, "values")));
  }
  CacheConfig on_host = config;
  on_host.device = at::Device(at::kCPU);
  try {
    detail::check_row_state(out.state, on_host);
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, path, ": ", e.what_without_backtrace());
  }
  check_positions(out.state, path);
  return out;
}

std::vector<int64_t> restore_prompt_cache(const std::string& path, Cache& cache, int64_t row,
                                          const std::string& model_id) {
  PromptCache saved = read_prompt_cache(path, cache.config(), model_id);
  cache.restore_row(saved.state.to(cache.config().device), row);
  return std::move(saved.ids);
}

}  // namespace statickv::reference
