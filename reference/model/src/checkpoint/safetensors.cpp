// safetensors files, read through a private memory map and written with
// aligned tensors.
//
// Note [safetensors in place]: read_safetensors maps the whole file
// MAP_PRIVATE with PROT_READ | PROT_WRITE and hands out tensors that point
// into the mapping. Each tensor's deleter holds a shared_ptr to the mapping,
// so the mapping lives exactly as long as the last tensor that uses it. The
// private mapping makes writes copy-on-write: a caller that modifies a
// weight in place changes its own pages, never the file.

#include "json_fields.hpp"

#include <statickv/model/checkpoint.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <utility>

namespace statickv::reference {

#if defined(__BYTE_ORDER__)
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian and is mapped as is");
#endif

namespace {

using namespace detail;

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

}  // namespace

const char* detail::safetensors_dtype_name(at::ScalarType type) { return dtype_name(type); }

Weights read_safetensors(const std::string& path) {
  TORCH_CHECK(std::filesystem::is_regular_file(path), path,
              ": expected an existing file but got none");
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

}  // namespace statickv::reference
