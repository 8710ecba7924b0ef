// Prompt-cache files (write_prompt_cache, read_prompt_cache;
// reference/model/src/checkpoint/prompt_cache.cpp): a saved row restored into another
// cache, a file read back without any cache, and every mismatched or damaged
// file refused.

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

namespace {

/// Prefills positions 0..len-1 of row 0 with random keys and values.
void prefill_row0(Cache& cache, int64_t len, uint64_t seed) {
  const CacheConfig& c = cache.config();
  at::manual_seed(seed);
  for (int64_t start = 0; start < len; start += c.effective_max_chunk()) {
    const int64_t n = std::min(c.effective_max_chunk(), len - start);
    const StepPlan step = cache.prepare(arange_positions(start, n), 1);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const at::Tensor k = at::randn({1, c.num_kv_heads, n, c.head_dim}, c.dtype);
      cache.update(l, k, at::randn_like(k), step);
    }
  }
}

CacheConfig prompt_config() { return ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 4); }

}  // namespace

TEST_CASE("a prompt-cache file restores the saved row and its ids into another cache's row",
          "[checkpoint][prompt_cache]") {
  TempDir dir;
  HybridCache source(prompt_config());
  prefill_row0(source, 11, 3);
  const std::vector<int64_t> ids = {5, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5};
  write_prompt_cache(dir.file("prompt.safetensors"), source, 0, ids, "tiny-seed-1");

  HybridCache target(prompt_config());
  prefill_row0(target, 20, 4);  // row 0 of the target held something else
  CHECK(restore_prompt_cache(dir.file("prompt.safetensors"), target, 1, "tiny-seed-1") == ids);
  for (int64_t l = 0; l < 2; ++l) {
    const int64_t cap = source.capacity(l);
    CHECK(bit_identical(target.keys(l)[1].narrow(1, 0, cap), source.keys(l)[0].narrow(1, 0, cap)));
    CHECK(bit_identical(target.values(l)[1].narrow(1, 0, cap),
                        source.values(l)[0].narrow(1, 0, cap)));
    CHECK(at::equal(target.slot_positions(l)[1], source.slot_positions(l)[0]));
  }
  CHECK(target.seq_lengths()[1].item<int64_t>() == 11);
  require_error(
      [&] {
        write_prompt_cache(dir.file("x.safetensors"), source, 0, {1, 2});
      },
      {"ids", "expected 11 ids", "got 2"});
}

TEST_CASE("a mismatched or damaged prompt-cache file is refused and leaves the cache unchanged",
          "[checkpoint][prompt_cache][errors]") {
  TempDir dir;
  const std::string path = dir.file("prompt.safetensors");
  HybridCache source(prompt_config());
  prefill_row0(source, 9, 3);
  write_prompt_cache(path, source, 0, {1, 2, 3, 4, 5, 6, 7, 8, 9}, "model-a");
  const auto refused = [&](const char* what, const CacheConfig& config, const std::string& file,
                           const std::string& model_id, const std::vector<std::string>& fragments) {
    INFO(what);
    HybridCache cache(config);
    prefill_row0(cache, 6, 5);
    const Snapshot before(cache);
    require_error([&] { restore_prompt_cache(file, cache, 0, model_id); }, fragments);
    CHECK(before.same_as(cache));
  };
  refused("another model id", prompt_config(), path, "model-b",
          {"fingerprint model_id", "\"model-b\"", "\"model-a\""});
  refused("another window, same ring capacity",
          ConfigBuilder().max_batch(2).max_len(32).hybrid(5, 3), path, "model-a",
          {"fingerprint sliding_window", "expected 5", "got 4"});
  refused("another head_dim", ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 4).head_dim(4),
          path, "model-a", {"fingerprint head_dim", "expected 4", "got 8"});
  refused("other layer types",
          ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 4).layer_types(
              {LayerType::kFull, LayerType::kSliding}),
          path, "model-a", {"fingerprint layer_types[0]", "expected full", "got sliding"});
  refused("another dtype", ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 4).dtype(at::kDouble),
          path, "model-a", {"state.keys", "Double", "Float"});
  refused("a file that does not exist", prompt_config(), dir.file("none"), "model-a",
          {"existing file"});

  // Damaged: a truncated file, and a file whose positions were tampered with.
  {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(dir.file("cut.safetensors"), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  refused("truncated", prompt_config(), dir.file("cut.safetensors"), "model-a",
          {"cut.safetensors"});
  Weights tampered = read_safetensors(path);
  tampered["layer.1.positions"] = tampered["layer.1.positions"].clone();
  tampered["layer.1.positions"][3] = 7;
  tampered.erase("fingerprint.model_id");
  write_safetensors(dir.file("bad.safetensors"), tampered);
  refused("positions that no saved row holds", prompt_config(), dir.file("bad.safetensors"), "",
          {"layer.1.positions", "[3]", "got 7", "damaged"});
  tampered.erase("ids");
  write_safetensors(dir.file("noids.safetensors"), tampered);
  refused("a missing tensor", prompt_config(), dir.file("noids.safetensors"), "",
          {"\"ids\"", "prompt-cache file", "got none"});
}

TEST_CASE("read_prompt_cache gives back the ids and the saved row, and touches no cache",
          "[checkpoint][prompt_cache]") {
  TempDir dir;
  const std::string path = dir.file("prompt.safetensors");
  HybridCache source(prompt_config());
  prefill_row0(source, 10, 7);
  const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  write_prompt_cache(path, source, 0, ids, "model-a");
  const RowState saved = source.save_row(0);

  const Snapshot before(source);
  const PromptCache read = read_prompt_cache(path, prompt_config(), "model-a");
  CHECK(before.same_as(source));
  CHECK(read.ids == ids);
  CHECK(read.state.length == 10);
  CHECK(read.state.types == saved.types);
  REQUIRE(read.state.keys.size() == 2);
  for (size_t l = 0; l < 2; ++l) {
    CHECK(read.state.keys[l].is_cpu());
    CHECK(at::equal(read.state.positions[l], saved.positions[l]));
    CHECK(bit_identical(read.state.keys[l], saved.keys[l]));
    CHECK(bit_identical(read.state.values[l], saved.values[l]));
  }
  // Another model's id, or a cache of another geometry: refused naming the file.
  require_error([&] { read_prompt_cache(path, prompt_config(), "model-b"); },
                {"prompt.safetensors", "fingerprint model_id", "\"model-b\""});
  require_error(
      [&] {
        read_prompt_cache(path, ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 4).head_dim(4),
                          "model-a");
      },
      {"prompt.safetensors", "fingerprint head_dim"});
}
