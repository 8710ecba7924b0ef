// safetensors files: write_safetensors then read_safetensors round trips,
// memory-mapped tensors, alignment, and the dtypes it refuses.

#include "checkpoint_files.hpp"

#include <statickv/model/checkpoint.hpp>
#include <statickv/model/prompt_cache.hpp>

#include <cmath>
#include <filesystem>
#include <string>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;
using namespace statickv::test::checkpoint;

// ---------------------------------------------------------------------------
// safetensors

TEST_CASE("write_safetensors then read_safetensors gives back names, dtypes, shapes and bytes",
          "[checkpoint]") {
  TempDir tmp;
  Weights tensors;
  tensors["f32"] = at::randn({2, 3});
  tensors["f16"] = at::randn({4}).to(at::kHalf);
  tensors["bf16"] = at::randn({3, 2}).to(at::kBFloat16);
  tensors["i64"] = at::arange(5, i64()).mul(1'000'000'007);
  tensors["i32"] = at::arange(-3, 3, at::kInt);
  tensors["transposed"] = at::randn({3, 4}).t();  // written contiguous
  tensors["empty"] = at::empty({0, 7});
  write_safetensors(tmp.file("t.safetensors"), tensors);

  const Weights back = read_safetensors(tmp.file("t.safetensors"));
  check_same_weights(back, tensors);
  CHECK(back.at("bf16").scalar_type() == at::kBFloat16);
  CHECK(back.at("i64").scalar_type() == at::kLong);
  CHECK(back.at("transposed").sizes() == at::IntArrayRef{4, 3});
  CHECK(back.at("empty").sizes() == at::IntArrayRef{0, 7});
}

TEST_CASE("read_safetensors returns tensors that point into the file's mapping, aligned",
          "[checkpoint]") {
  TempDir tmp;
  Weights tensors;
  tensors["a_u8"] = at::arange(3, at::kByte);  // narrowest first by name
  tensors["b_f16"] = at::ones({3}, at::kHalf);
  tensors["c_f32"] = at::ones({5});
  tensors["d_i64"] = at::ones({1}, i64());
  write_safetensors(tmp.file("t.safetensors"), tensors);
  const uintmax_t size = fs::file_size(tmp.file("t.safetensors"));

  const Weights back = read_safetensors(tmp.file("t.safetensors"));
  for (const auto& [name, tensor] : back) {
    INFO(name);
    CHECK(within(tensor, back.at("a_u8"), size));
    CHECK(reinterpret_cast<uintptr_t>(tensor.data_ptr()) % tensor.element_size() == 0);
  }
}

TEST_CASE("a tensor stored misaligned for its dtype is read with its values", "[checkpoint]") {
  TempDir tmp;
  const std::string path = tmp.file("t.safetensors");
  // A 63-byte header puts the data at file offset 71: misaligned for F32.
  std::string header = R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  header.append(63 - header.size(), ' ');
  const float values[2] = {1.5f, -2.25f};
  write_raw_safetensors(path, header, std::string(reinterpret_cast<const char*>(values), 8));

  const at::Tensor w = read_safetensors(path).at("w");
  CHECK(reinterpret_cast<uintptr_t>(w.data_ptr()) % 4 == 0);
  CHECK(at::equal(w, at::tensor({1.5f, -2.25f})));
}

TEST_CASE("writing to a tensor read from a file leaves the file unchanged", "[checkpoint]") {
  TempDir tmp;
  write_safetensors(tmp.file("t.safetensors"), {{"w", at::zeros({16})}});
  const std::string before = read_bytes(tmp.file("t.safetensors"));

  Weights back = read_safetensors(tmp.file("t.safetensors"));
  back.at("w").fill_(7.0);
  CHECK(back.at("w").sum().item<float>() == 16 * 7.0f);
  CHECK(read_bytes(tmp.file("t.safetensors")) == before);
  CHECK(at::equal(read_safetensors(tmp.file("t.safetensors")).at("w"), at::zeros({16})));
}

TEST_CASE("a tensor read from a file stays valid after everything else is released",
          "[checkpoint]") {
  TempDir tmp;
  const at::Tensor w = at::arange(32, f32());
  write_safetensors(tmp.file("t.safetensors"), {{"w", w}, {"other", at::ones({8})}});
  at::Tensor kept;
  {
    Weights back = read_safetensors(tmp.file("t.safetensors"));
    kept = back.at("w");
  }
  fs::remove(tmp.file("t.safetensors"));
  CHECK(at::equal(kept, w));
}

TEST_CASE("write_safetensors rejects a dtype safetensors cannot name, before writing",
          "[checkpoint]") {
  TempDir tmp;
  const std::string path = tmp.file("t.safetensors");
  require_error(
      [&] {
        write_safetensors(path, {{"z", at::ones({2}, at::kComplexFloat)}});
      },
      {path, "\"z\"", "expected a dtype among"});
  CHECK_FALSE(fs::exists(path));
}
