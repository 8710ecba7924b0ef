#pragma once
// statickv's config fingerprint in an AOTInductor package's metadata: the
// cache shapes a package was compiled for, written by examples/aoti/export.py
// (aot_inductor.metadata) and checked here against a cache before the
// package's first run (Note [AOTInductor packages], docs/design.md).

#include <statickv/config.hpp>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace statickv::aoti {

/// The layout of the package's flat input list this runner feeds.
inline constexpr const char* kInputs =
    "ids,positions,slots[types],masks[types],keys[layers],values[layers]";

using Fingerprint = std::vector<std::pair<std::string, std::string>>;

/// The statickv.* metadata keys describing `config`'s buffers, in the order
/// they are checked (the layout before the sizes it implies): inputs
/// (kInputs), num_layers, layer_types ("full,sliding,..."), sliding_window
/// (0 without sliding layers), num_kv_heads, head_dim, dtype (c10's name:
/// "Float"), device ("cpu", "cuda"), max_batch, capacities (slots per layer,
/// scratch slot excluded: max_len, or the ring's). A package also carries
/// its own limits, statickv.max_query and statickv.vocab_size.
Fingerprint fingerprint(const CacheConfig& config);

/// Throws c10::Error unless every key of fingerprint(config) is in
/// `metadata` with the same value; the message names the package, the key,
/// the package's value and the cache's (a missing key: "not a statickv
/// package").
void check_fingerprint(const std::unordered_map<std::string, std::string>& metadata,
                       const CacheConfig& config, const std::string& package);

/// A statickv.* integer of the package's metadata (max_query, vocab_size).
int64_t metadata_int(const std::unordered_map<std::string, std::string>& metadata,
                     const std::string& key, const std::string& package);

}  // namespace statickv::aoti
