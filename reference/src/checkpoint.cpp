// Hugging Face checkpoints: config.json, safetensors files (read through a
// private memory map), sharded indexes, named shapes and random weights.
//
// Note [safetensors in place]: read_safetensors maps the whole file
// MAP_PRIVATE with PROT_READ | PROT_WRITE and hands out tensors that point
// into the mapping. Each tensor's deleter holds a shared_ptr to the mapping,
// so the mapping lives exactly as long as the last tensor that uses it. The
// private mapping makes writes copy-on-write: a caller that modifies a
// weight in place changes its own pages, never the file.

#include <statickv/reference/checkpoint.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

namespace statickv::reference {

#if defined(__BYTE_ORDER__)
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian and is mapped as is");
#endif

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// Files and JSON.

std::string read_text_file(const std::string& path) {
  TORCH_CHECK(fs::is_regular_file(path), path, ": expected an existing file but got none");
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in, path, ": expected a readable file but got: ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  TORCH_CHECK(!in.bad(), path, ": expected a readable file but got a read error");
  return text.str();
}

Json parse_json(const std::string& path, const char* begin, const char* end, const char* what) {
  try {
    return Json::parse(begin, end);
  } catch (const Json::exception& e) {
    TORCH_CHECK(false, path, ": expected ", what, " but got invalid JSON: ", e.what());
  }
  return Json();  // unreachable
}

Json parse_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  Json json = parse_json(path, text.data(), text.data() + text.size(), "a JSON object");
  TORCH_CHECK(json.is_object(), path, ": expected a JSON object but got ", json.type_name());
  return json;
}

bool has(const Json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && !it->is_null();
}

/// `object[key]`, which must be present and not null. `where` names the
/// field in messages ("rope_parameters.factor").
const Json& require(const std::string& path, const Json& object, const char* key,
                    const std::string& where) {
  auto it = object.find(key);
  TORCH_CHECK(it != object.end() && !it->is_null(), path, ": expected field \"", where,
              "\" but got none");
  return *it;
}

int64_t as_int(const std::string& path, const Json& value, const std::string& where) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned()) {
      const uint64_t u = value.get<uint64_t>();
      TORCH_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), path,
                  ": expected field \"", where, "\" to fit in int64 but got ", u);
      return static_cast<int64_t>(u);
    }
    return value.get<int64_t>();
  }
  // Some tools write integral fields as 8192.0.
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.0e15) {
      return static_cast<int64_t>(d);
    }
  }
  TORCH_CHECK(false, path, ": expected field \"", where, "\" to be an integer but got ",
              value.dump());
  return 0;  // unreachable
}

double as_double(const std::string& path, const Json& value, const std::string& where) {
  TORCH_CHECK(value.is_number(), path, ": expected field \"", where, "\" to be a number but got ",
              value.dump());
  return value.get<double>();
}

bool as_bool(const std::string& path, const Json& value, const std::string& where) {
  TORCH_CHECK(value.is_boolean(), path, ": expected field \"", where,
              "\" to be true or false but got ", value.dump());
  return value.get<bool>();
}

std::string as_string(const std::string& path, const Json& value, const std::string& where) {
  TORCH_CHECK(value.is_string(), path, ": expected field \"", where, "\" to be a string but got ",
              value.dump());
  return value.get<std::string>();
}

int64_t required_int(const std::string& path, const Json& object, const char* key,
                     const std::string& where) {
  return as_int(path, require(path, object, key, where), where);
}

double required_double(const std::string& path, const Json& object, const char* key,
                       const std::string& where) {
  return as_double(path, require(path, object, key, where), where);
}

// ---------------------------------------------------------------------------
// config.json.

/// Rope fields from an object holding rope_type (or type), rope_theta and the
/// llama3 factors: transformers 5's rope_parameters or the older rope_scaling.
void read_rope(const std::string& path, const Json& object, const std::string& name,
               RopeConfig& rope) {
  TORCH_CHECK(object.is_object(), path, ": expected field \"", name,
              "\" to be an object or null but got ", object.dump());
  // Models whose rope differs per layer type nest one object per type; none of
  // the model types read here does.
  TORCH_CHECK(!object.contains("full_attention") && !object.contains("sliding_attention"), path,
              ": expected field \"", name, "\" to hold one rope for every layer but got ",
              object.dump());
  if (has(object, "rope_type")) {
    rope.type = as_string(path, object["rope_type"], name + ".rope_type");
  } else if (has(object, "type")) {
    rope.type = as_string(path, object["type"], name + ".type");
  }
  TORCH_CHECK(rope.type == "default" || rope.type == "llama3", path, ": expected field \"", name,
              ".rope_type\" to be \"default\" or \"llama3\" but got \"", rope.type, "\"");
  if (has(object, "rope_theta")) {
    rope.theta = as_double(path, object["rope_theta"], name + ".rope_theta");
  }
  if (rope.type == "llama3") {
    rope.factor = required_double(path, object, "factor", name + ".factor");
    rope.low_freq_factor =
        required_double(path, object, "low_freq_factor", name + ".low_freq_factor");
    rope.high_freq_factor =
        required_double(path, object, "high_freq_factor", name + ".high_freq_factor");
    rope.original_max_position_embeddings =
        required_int(path, object, "original_max_position_embeddings",
                     name + ".original_max_position_embeddings");
  }
}

/// eos_token_id: an int or a list; absent takes the class default, null is none.
std::vector<int64_t> read_eos(const std::string& path, const Json& json,
                              const std::vector<int64_t>& absent) {
  auto it = json.find("eos_token_id");
  if (it == json.end()) return absent;
  std::vector<int64_t> ids;
  if (it->is_array()) {
    for (size_t i = 0; i < it->size(); ++i) {
      ids.push_back(as_int(path, (*it)[i], "eos_token_id[" + std::to_string(i) + "]"));
    }
  } else if (!it->is_null()) {
    ids.push_back(as_int(path, *it, "eos_token_id"));
  }
  return ids;
}

std::vector<LayerType> read_layer_types(const std::string& path, const Json& json) {
  const Json& types = json["layer_types"];
  TORCH_CHECK(types.is_array(), path, ": expected field \"layer_types\" to be a list but got ",
              types.dump());
  std::vector<LayerType> out;
  for (size_t i = 0; i < types.size(); ++i) {
    const std::string where = "layer_types[" + std::to_string(i) + "]";
    const std::string type = as_string(path, types[i], where);
    if (type == "full_attention") {
      out.push_back(LayerType::kFull);
    } else if (type == "sliding_attention") {
      out.push_back(LayerType::kSliding);
    } else {
      TORCH_CHECK(false, path, ": expected field \"", where,
                  "\" to be \"full_attention\" or \"sliding_attention\" but got \"", type, "\"");
    }
  }
  return out;
}

// Note [layer types per model type]: which layers slide is decided as
// transformers 5.24 decides it for each model type, not by one rule for all:
//
//   llama    layer_types and sliding_window are ignored: every layer is full.
//   mistral  layer_types is ignored (transformers warns); sliding_window,
//            when not null (absent means the class default 4096), applies
//            to every layer.
//   qwen2    the window exists only with use_sliding_window: true (else it
//            is null whatever sliding_window says); layer_types is applied
//            as written, and when absent it is "sliding from layer
//            max_window_layers on" (default 28) if there is a window, else
//            all full. A sliding entry without a window is refused:
//            transformers raises at the first forward pass.
//
// docs/checkpoints.md has the same table; tests/hf cross-checks each case.

/// sliding_window as a model type's config class reads it: absent takes the
/// class default, null (or a window the type does not use) is 0.
int64_t read_window(const std::string& path, const Json& json, int64_t class_default) {
  auto it = json.find("sliding_window");
  if (it == json.end()) return class_default;
  if (it->is_null()) return 0;
  return as_int(path, *it, "sliding_window");
}

void read_layers(const std::string& path, const Json& json, ModelConfig& config) {
  const int64_t layers = config.num_hidden_layers;
  config.layer_types.clear();
  config.sliding_window = 0;
  if (config.model_type == "mistral") {
    config.sliding_window = read_window(path, json, /*class_default=*/4096);
    if (config.sliding_window != 0) config.layer_types = all_sliding(layers);
    return;
  }
  if (config.model_type != "qwen2") return;  // llama: all full
  const bool use_window = has(json, "use_sliding_window") &&
                          as_bool(path, json["use_sliding_window"], "use_sliding_window");
  const int64_t window = use_window ? read_window(path, json, /*class_default=*/4096) : 0;
  if (has(json, "layer_types")) {
    config.layer_types = read_layer_types(path, json);
    TORCH_CHECK(static_cast<int64_t>(config.layer_types.size()) == layers, path,
                ": expected field \"layer_types\" to have num_hidden_layers (", layers,
                ") entries but got ", config.layer_types.size());
    TORCH_CHECK(window != 0 || !config.has_sliding(), path,
                ": expected \"layer_types\" without sliding_attention entries, or "
                "\"use_sliding_window\": true with a \"sliding_window\", but got sliding layers "
                "with no window (use_sliding_window ",
                use_window ? "true, sliding_window null" : "false", ")");
  } else if (window != 0) {
    const int64_t first = has(json, "max_window_layers")
                              ? as_int(path, json["max_window_layers"], "max_window_layers")
                              : 28;  // Qwen2Config's default
    for (int64_t i = 0; i < layers; ++i) {
      config.layer_types.push_back(i >= first ? LayerType::kSliding : LayerType::kFull);
    }
  }
  if (config.has_sliding()) config.sliding_window = window;
}

/// What transformers 5.24's config class of each model type assumes for a
/// field that config.json leaves out (LlamaConfig, MistralConfig,
/// Qwen2Config). kv_heads 0: as many as num_attention_heads.
struct ClassDefaults {
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
  int64_t num_key_value_heads;
  int64_t max_position_embeddings;
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id;  // -1: none
};

ClassDefaults class_defaults(const std::string& type) {
  if (type == "mistral") return {32000, 4096, 14336, 32, 32, 8, 4096 * 32, {2}, 1};
  if (type == "qwen2") return {151936, 4096, 22016, 32, 32, 32, 32768, {}, -1};
  return {32000, 4096, 11008, 32, 32, 0, 2048, {2}, 1};  // llama
}

/// An integer field: `absent` when the key is missing, `null_value` when it
/// is null.
int64_t int_or(const std::string& path, const Json& json, const char* key, int64_t absent,
               int64_t null_value) {
  auto it = json.find(key);
  if (it == json.end()) return absent;
  if (it->is_null()) return null_value;
  return as_int(path, *it, key);
}

/// A size field: the class default when absent; null is not a size.
int64_t size_or(const std::string& path, const Json& json, const char* key, int64_t absent) {
  auto it = json.find(key);
  if (it == json.end()) return absent;
  return as_int(path, *it, key);
}

void read_sizes(const std::string& path, const Json& json, const ClassDefaults& d,
                ModelConfig& config) {
  config.vocab_size = size_or(path, json, "vocab_size", d.vocab_size);
  config.hidden_size = size_or(path, json, "hidden_size", d.hidden_size);
  config.intermediate_size = size_or(path, json, "intermediate_size", d.intermediate_size);
  config.num_hidden_layers = size_or(path, json, "num_hidden_layers", d.num_hidden_layers);
  config.num_attention_heads = size_or(path, json, "num_attention_heads", d.num_attention_heads);
  const int64_t heads = config.num_attention_heads;
  // null means "no grouping" in every class; absent takes the class default.
  config.num_key_value_heads =
      int_or(path, json, "num_key_value_heads",
             d.num_key_value_heads > 0 ? d.num_key_value_heads : heads, heads);
  if (has(json, "head_dim")) {
    config.head_dim = as_int(path, json["head_dim"], "head_dim");
  } else {
    TORCH_CHECK(heads > 0 && config.hidden_size % heads == 0, path, ": expected hidden_size (",
                config.hidden_size,
                ") divisible by num_attention_heads when head_dim is absent but got ", heads,
                " heads");
    config.head_dim = config.hidden_size / heads;
  }
  config.max_position_embeddings =
      size_or(path, json, "max_position_embeddings", d.max_position_embeddings);
  if (has(json, "rms_norm_eps")) {
    config.rms_norm_eps = as_double(path, json["rms_norm_eps"], "rms_norm_eps");
  }
  if (has(json, "tie_word_embeddings")) {
    config.tie_word_embeddings = as_bool(path, json["tie_word_embeddings"], "tie_word_embeddings");
  }
}

/// Biases and the MLP as each model type builds them: Llama puts
/// attention_bias on q, k, v and o; Qwen2 always has q/k/v biases and never
/// an o bias; Mistral has none (its class ignores attention_bias).
void read_projections(const std::string& path, const Json& json, ModelConfig& config) {
  // The reference decoder's MLP is SiLU-gated with no biases.
  if (has(json, "hidden_act")) {
    const std::string act = as_string(path, json["hidden_act"], "hidden_act");
    TORCH_CHECK(act == "silu", path, ": expected hidden_act \"silu\" but got \"", act, "\"");
  }
  const std::string& type = config.model_type;
  if (type == "llama" && has(json, "mlp_bias")) {
    TORCH_CHECK(!as_bool(path, json["mlp_bias"], "mlp_bias"), path,
                ": expected mlp_bias false (MLP biases are not supported) but got true");
  }
  config.attention_bias = type == "qwen2";
  config.o_proj_bias = false;
  if (type == "llama" && has(json, "attention_bias")) {
    config.attention_bias = as_bool(path, json["attention_bias"], "attention_bias");
    config.o_proj_bias = config.attention_bias;
  }
}

/// transformers 5 keeps the rope in rope_parameters; older configs have a
/// top-level rope_theta and an optional rope_scaling.
void read_rope_fields(const std::string& path, const Json& json, RopeConfig& rope) {
  if (has(json, "rope_theta")) rope.theta = as_double(path, json["rope_theta"], "rope_theta");
  if (has(json, "rope_parameters")) {
    read_rope(path, json["rope_parameters"], "rope_parameters", rope);
  } else if (has(json, "rope_scaling")) {
    read_rope(path, json["rope_scaling"], "rope_scaling", rope);
  }
}

// ---------------------------------------------------------------------------
// safetensors.

struct DtypeName {
  const char* name;
  at::ScalarType type;
};

constexpr DtypeName kDtypes[] = {
    {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
    {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
    {"U8", at::kByte},    {"BOOL", at::kBool},
};

std::string known_dtype_names() {
  std::string out;
  for (const DtypeName& d : kDtypes) {
    if (!out.empty()) out += ", ";
    out += d.name;
  }
  return out;
}

bool dtype_from_name(const std::string& name, at::ScalarType& type) {
  for (const DtypeName& d : kDtypes) {
    if (name == d.name) {
      type = d.type;
      return true;
    }
  }
  return false;
}

const char* dtype_name(at::ScalarType type) {
  for (const DtypeName& d : kDtypes) {
    if (type == d.type) return d.name;
  }
  return nullptr;
}

/// A read-only file mapped MAP_PRIVATE; see Note [safetensors in place].
class Mapping {
 public:
  explicit Mapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    TORCH_CHECK(fd >= 0, path, ": expected a readable file but got: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      TORCH_CHECK(false, path, ": expected a readable file but got: ", std::strerror(err));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ < 8) {
      ::close(fd);
      TORCH_CHECK(false, path, ": expected at least 8 bytes (the header length) but got ", size_,
                  " bytes");
    }
    void* addr = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps its own reference to the file
    TORCH_CHECK(addr != MAP_FAILED, path,
                ": expected a file that can be memory-mapped but got: ", std::strerror(err));
    data_ = static_cast<char*>(addr);
  }
  ~Mapping() { ::munmap(data_, size_); }
  // Owns the mapping; tensors share it through shared_ptr instead.
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

uint64_t read_le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << c10::IntArrayRef(shape);
  return out.str();
}

/// One tensor of a safetensors file, with every header check done.
at::Tensor tensor_from_header(const std::string& path, const std::shared_ptr<Mapping>& mapping,
                              uint64_t data_start, const std::string& name, const Json& entry) {
  const std::string where = "tensor \"" + name + "\"";
  TORCH_CHECK(entry.is_object(), path, ": ", where,
              ": expected an object with dtype, shape and data_offsets but got ", entry.dump());
  const std::string dtype =
      as_string(path, require(path, entry, "dtype", name + ".dtype"), name + ".dtype");
  at::ScalarType type{};
  TORCH_CHECK(dtype_from_name(dtype, type), path, ": ", where, ": expected a dtype among ",
              known_dtype_names(), " but got ", dtype);
  const Json& shape_json = require(path, entry, "shape", name + ".shape");
  TORCH_CHECK(shape_json.is_array(), path, ": ", where, ": expected a list shape but got ",
              shape_json.dump());
  std::vector<int64_t> shape;
  const int64_t elem = static_cast<int64_t>(c10::elementSize(type));
  int64_t bytes = elem;
  for (const Json& dim_json : shape_json) {
    const int64_t dim = as_int(path, dim_json, name + ".shape");
    TORCH_CHECK(dim >= 0, path, ": ", where, ": expected non-negative sizes but got ",
                shape_json.dump());
    TORCH_CHECK(dim == 0 || bytes <= std::numeric_limits<int64_t>::max() / dim, path, ": ", where,
                ": expected a shape whose size fits in int64 but got ", shape_json.dump());
    bytes *= dim;
    shape.push_back(dim);
  }
  const Json& offsets = require(path, entry, "data_offsets", name + ".data_offsets");
  TORCH_CHECK(offsets.is_array() && offsets.size() == 2, path, ": ", where,
              ": expected data_offsets [begin, end] but got ", offsets.dump());
  const int64_t begin = as_int(path, offsets[0], name + ".data_offsets");
  const int64_t end = as_int(path, offsets[1], name + ".data_offsets");
  const uint64_t buffer = mapping->size() - data_start;
  TORCH_CHECK(begin >= 0 && begin <= end, path, ": ", where,
              ": expected data_offsets with 0 <= begin <= end but got ", offsets.dump());
  TORCH_CHECK(static_cast<uint64_t>(end) <= buffer, path, ": ", where,
              ": expected data_offsets within the ", buffer,
              "-byte data buffer (is the file truncated?) but got ", offsets.dump());
  TORCH_CHECK(end - begin == bytes, path, ": ", where, ": expected ", bytes, " bytes for ", dtype,
              " ", shape_string(shape), " but got data_offsets ", offsets.dump(), " (", end - begin,
              " bytes)");

  char* ptr = mapping->data() + data_start + begin;
  const auto options = at::TensorOptions().dtype(type).device(at::kCPU);
  if (reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(elem) != 0) {
    // Writers that sort by alignment (ours, Python's safetensors) never get
    // here; a misaligned tensor is copied so kernels see aligned data.
    at::Tensor copy = at::empty(shape, options);
    std::memcpy(copy.data_ptr(), ptr, static_cast<size_t>(bytes));
    return copy;
  }
  std::shared_ptr<Mapping> keep = mapping;
  return at::from_blob(
      ptr, shape, [keep](void*) {}, options);
}

// ---------------------------------------------------------------------------
// Checkpoint directories.

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

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += ", ";
    out += item;
  }
  return out;
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
  TORCH_CHECK(at::isFloatingType(type), file, ": tensor \"", name,
              "\": expected a floating dtype (F32, F16, BF16, F64) but got ",
              dtype_name(type) != nullptr ? dtype_name(type) : c10::toString(type));
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
                  const std::vector<std::pair<std::string, std::vector<int64_t>>>& expected,
                  const ModelConfig& config, const LoadOptions& options) {
  std::set<std::string> used;
  for (const auto& entry : expected) used.insert(entry.first);
  std::vector<std::string> unused;
  for (const auto& [file, weights] : sources.tensors) {
    for (const auto& [name, tensor] : weights) {
      if (used.count(name) != 0 || ends_with(name, "rotary_emb.inv_freq")) continue;
      if (name == "lm_head.weight" && config.tie_word_embeddings) {
        const at::Tensor& embed = sources.tensors.at(file_of(sources, "model.embed_tokens.weight"))
                                      .at("model.embed_tokens.weight");
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

// ---------------------------------------------------------------------------
// Named shapes.

ModelConfig tiny() {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 128;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 256;
  c.rope.type = "default";
  c.rope.theta = 10000.0;
  return c;
}

ModelConfig llama3(int64_t hidden, int64_t intermediate, int64_t layers, int64_t head_dim,
                   double factor, bool tied) {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 128256;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = head_dim;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5;
  c.rope.type = "llama3";
  c.rope.theta = 500000.0;
  c.rope.factor = factor;
  c.rope.low_freq_factor = 1.0;
  c.rope.high_freq_factor = 4.0;
  c.rope.original_max_position_embeddings = 8192;
  c.tie_word_embeddings = tied;
  c.eos_token_ids = {128001, 128008, 128009};
  c.bos_token_id = 128000;
  return c;
}

}  // namespace

// ---------------------------------------------------------------------------

ModelConfig load_config(const std::string& config_json_path) {
  const std::string& path = config_json_path;
  const Json json = parse_json_file(path);
  ModelConfig config;
  config.model_type =
      as_string(path, require(path, json, "model_type", "model_type"), "model_type");
  const std::string& type = config.model_type;
  TORCH_CHECK(type == "llama" || type == "mistral" || type == "qwen2", path,
              ": expected model_type \"llama\", \"mistral\" or \"qwen2\" but got \"", type, "\"");
  const ClassDefaults defaults = class_defaults(type);
  read_sizes(path, json, defaults, config);
  read_projections(path, json, config);
  read_rope_fields(path, json, config.rope);
  read_layers(path, json, config);
  config.eos_token_ids = read_eos(path, json, defaults.eos_token_ids);
  config.bos_token_id = int_or(path, json, "bos_token_id", defaults.bos_token_id, -1);
  try {
    config.validate();
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, path, ": ", e.what_without_backtrace());
  }
  return config;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> expected_parameters(
    const ModelConfig& config) {
  config.validate();
  const int64_t hidden = config.hidden_size;
  const int64_t inter = config.intermediate_size;
  const int64_t q_dim = config.num_attention_heads * config.head_dim;
  const int64_t kv_dim = config.num_key_value_heads * config.head_dim;

  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  out.push_back({"model.embed_tokens.weight", {config.vocab_size, hidden}});
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".";
    out.push_back({p + "input_layernorm.weight", {hidden}});
    out.push_back({p + "self_attn.q_proj.weight", {q_dim, hidden}});
    out.push_back({p + "self_attn.k_proj.weight", {kv_dim, hidden}});
    out.push_back({p + "self_attn.v_proj.weight", {kv_dim, hidden}});
    if (config.attention_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q_dim}});
      out.push_back({p + "self_attn.k_proj.bias", {kv_dim}});
      out.push_back({p + "self_attn.v_proj.bias", {kv_dim}});
    }
    out.push_back({p + "self_attn.o_proj.weight", {hidden, q_dim}});
    if (config.o_proj_bias) out.push_back({p + "self_attn.o_proj.bias", {hidden}});
    out.push_back({p + "post_attention_layernorm.weight", {hidden}});
    out.push_back({p + "mlp.gate_proj.weight", {inter, hidden}});
    out.push_back({p + "mlp.up_proj.weight", {inter, hidden}});
    out.push_back({p + "mlp.down_proj.weight", {hidden, inter}});
  }
  out.push_back({"model.norm.weight", {hidden}});
  if (!config.tie_word_embeddings) out.push_back({"lm_head.weight", {config.vocab_size, hidden}});
  return out;
}

Weights read_safetensors(const std::string& path) {
  TORCH_CHECK(fs::is_regular_file(path), path, ": expected an existing file but got none");
  auto mapping = std::make_shared<Mapping>(path);
  const uint64_t size = mapping->size();
  const uint64_t header_len = read_le64(mapping->data());
  TORCH_CHECK(header_len <= size - 8, path, ": expected a header length of at most ", size - 8,
              " bytes (the file's size less 8) but got ", header_len);
  const char* header = mapping->data() + 8;
  const Json json = parse_json(path, header, header + header_len, "a JSON safetensors header");
  TORCH_CHECK(json.is_object(), path, ": expected a JSON object header but got ", json.type_name());

  Weights tensors;
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    tensors[it.key()] = tensor_from_header(path, mapping, 8 + header_len, it.key(), it.value());
  }
  return tensors;
}

void write_safetensors(const std::string& path, const Weights& tensors) {
  // Check everything before the file is touched.
  for (const auto& [name, tensor] : tensors) {
    TORCH_CHECK(name != "__metadata__", path, ": expected tensor names other than __metadata__");
    TORCH_CHECK(tensor.defined(), path, ": tensor \"", name, "\": expected a defined tensor");
    TORCH_CHECK(dtype_name(tensor.scalar_type()) != nullptr, path, ": tensor \"", name,
                "\": expected a dtype among ", known_dtype_names(), " but got ",
                tensor.scalar_type());
  }

  // Widest elements first, so every tensor starts aligned to its element size
  // (the header is padded to 8 bytes) and there are no holes between tensors.
  std::vector<std::pair<std::string, at::Tensor>> order;
  for (const auto& [name, tensor] : tensors) {
    order.emplace_back(name, tensor.detach().to(at::kCPU).contiguous());
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second.element_size() > b.second.element_size();
  });

  Json header = Json::object();
  header["__metadata__"] = {{"format", "pt"}};
  int64_t offset = 0;
  for (const auto& [name, tensor] : order) {
    const int64_t bytes = static_cast<int64_t>(tensor.nbytes());
    header[name] = {{"dtype", dtype_name(tensor.scalar_type())},
                    {"shape", tensor.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TORCH_CHECK(out, path, ": expected a writable file but got: ", std::strerror(errno));
  char length[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i, n >>= 8) length[i] = static_cast<char>(n & 0xff);
  out.write(length, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, tensor] : order) {
    out.write(static_cast<const char*>(tensor.data_ptr()),
              static_cast<std::streamsize>(tensor.nbytes()));
  }
  out.flush();
  TORCH_CHECK(out, path, ": expected to write ", 8 + text.size() + offset,
              " bytes but got a write error");
}

Checkpoint load_checkpoint(const std::string& dir, at::ScalarType dtype, at::Device device,
                           const LoadOptions& options) {
  TORCH_CHECK(at::isFloatingType(dtype), "dtype: expected a floating dtype but got ", dtype);
  Checkpoint checkpoint;
  checkpoint.config = load_config((fs::path(dir) / "config.json").string());
  const Sources sources = read_sources(dir);
  // Every check first; conversion (which may allocate a lot) only after.
  const auto expected = expected_parameters(checkpoint.config);
  std::vector<std::pair<std::string, at::Tensor>> found;
  for (const auto& [name, shape] : expected) {
    found.emplace_back(name, find_parameter(sources, name, shape));
  }
  check_unused(dir, sources, expected, checkpoint.config, options);
  for (auto& [name, tensor] : found) {
    const bool in_place = device.is_cpu() && tensor.scalar_type() == dtype;
    checkpoint.weights[name] = in_place ? tensor : tensor.to(device, dtype);
  }
  return checkpoint;
}

ModelConfig named_config(const std::string& name) {
  ModelConfig config;
  if (name == "tiny") {
    config = tiny();
  } else if (name == "tiny-mistral") {
    config = tiny();
    config.model_type = "mistral";
    config.layer_types = all_sliding(config.num_hidden_layers);
    config.sliding_window = 8;
  } else if (name == "tiny-qwen2") {
    config = tiny();
    config.model_type = "qwen2";
    config.attention_bias = true;
    config.num_hidden_layers = 4;
    config.layer_types = {LayerType::kFull, LayerType::kFull, LayerType::kSliding,
                          LayerType::kSliding};
    config.sliding_window = 8;
  } else if (name == "llama-3.2-1b") {
    config = llama3(/*hidden=*/2048, /*intermediate=*/8192, /*layers=*/16, /*head_dim=*/64,
                    /*factor=*/32.0, /*tied=*/true);
  } else if (name == "llama-3.1-8b") {
    config = llama3(/*hidden=*/4096, /*intermediate=*/14336, /*layers=*/32, /*head_dim=*/128,
                    /*factor=*/8.0, /*tied=*/false);
  } else {
    TORCH_CHECK(false, "named_config: expected one of ", join(named_config_names()), " but got \"",
                name, "\"");
  }
  config.validate();
  return config;
}

std::vector<std::string> named_config_names() {
  return {"tiny", "tiny-mistral", "tiny-qwen2", "llama-3.2-1b", "llama-3.1-8b"};
}

Weights random_weights(const ModelConfig& config, uint64_t seed, at::ScalarType dtype,
                       at::Device device) {
  TORCH_CHECK(at::isFloatingType(dtype), "dtype: expected a floating dtype but got ", dtype);
  const auto params = expected_parameters(config);
  // Drawn on the CPU in float32 in a fixed order, so a seed gives the same
  // weights on every device and in every dtype (up to rounding).
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(at::kCPU);
  Weights weights;
  for (const auto& [name, shape] : params) {
    const bool is_norm =
        shape.size() == 1 && name.size() >= 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    at::Tensor tensor =
        is_norm ? at::ones(shape, f32) : at::empty(shape, f32).normal_(0.0, 0.02, generator);
    weights[name] = tensor.to(device, dtype);
  }
  return weights;
}

}  // namespace statickv::reference
