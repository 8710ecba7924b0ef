#pragma once
// Prompt-cache files: a cache row saved with Cache::save_row, its token ids
// and a fingerprint of the cache config and model, in one safetensors file,
// so a long prompt prefilled once is restored into any row of a compatible
// cache in a later process (docs/design.md, Note [a restored row is the
// saved row]).
//
// Tensors: "ids" int64 [n]; "fingerprint.config" int64 [num_layers,
// num_kv_heads, head_dim, sliding_window, ring capacity] (0, 0 without
// sliding layers); "fingerprint.layer_types" int64 [num_layers] (0 full, 1
// sliding); "fingerprint.model_id" uint8 (the id's bytes, absent when
// empty); per layer l "layer.l.positions", "layer.l.keys", "layer.l.values"
// (RowState's tensors, in the cache dtype).

#include <statickv/cache.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace statickv::reference {

/// What a prompt-cache file holds: the prompt's token ids and the row.
struct PromptCache {
  std::vector<int64_t> ids;
  RowState state;  ///< host tensors
};

/// Saves row `row` of `cache`, whose seq_length must be ids.size() (the
/// prompt it holds), with the fingerprint of the cache's config and
/// `model_id` (optional; any string naming the weights).
void write_prompt_cache(const std::string& path, const Cache& cache, int64_t row,
                        const std::vector<int64_t>& ids, const std::string& model_id = "");

/// Reads a prompt-cache file and checks it against `config` and `model_id`:
/// a damaged file, a missing tensor, a fingerprint that differs (naming the
/// field, the expected and the actual value) or positions that cannot be a
/// saved row give a c10::Error naming the file. Touches no cache.
PromptCache read_prompt_cache(const std::string& path, const CacheConfig& config,
                              const std::string& model_id = "");

/// read_prompt_cache, then restores the row into row `row` of `cache`;
/// returns the ids. Every check runs before the cache is written: on error
/// the cache is left as it was.
std::vector<int64_t> restore_prompt_cache(const std::string& path, Cache& cache, int64_t row,
                                          const std::string& model_id = "");

}  // namespace statickv::reference
