// statickv-demo's token-id prompts (prompts.hpp).

#include "prompts.hpp"

#include <statickv/flags/flags.hpp>

#include <algorithm>
#include <random>
#include <sstream>
#include <utility>

namespace statickv::demo {

using flags::FlagError;

std::vector<std::vector<int64_t>> parse_prompt_ids(const std::string& text) {
  std::vector<std::vector<int64_t>> prompts;
  std::stringstream rows(text);
  std::string row;
  while (std::getline(rows, row, ';')) {
    std::vector<int64_t> ids;
    std::stringstream cells(row);
    std::string cell;
    while (std::getline(cells, cell, ',')) {
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      ids.push_back(flags::parse_int("--prompt-ids", cell, /*min=*/0));
    }
    if (ids.empty()) {
      throw flags::FlagError("--prompt-ids: expected token ids in every prompt but prompt " +
                             std::to_string(prompts.size()) + " has none");
    }
    prompts.push_back(std::move(ids));
  }
  if (prompts.empty())
    throw flags::FlagError("--prompt-ids: expected at least one prompt but got none");
  return prompts;
}

std::vector<std::vector<int64_t>> random_prompts(const Options& o, int64_t vocab_size) {
  std::vector<std::vector<int64_t>> prompts;
  std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
  for (int64_t r = 0; r < o.batch; ++r) {
    const int64_t len = std::max<int64_t>(1, o.prompt_len - (r * o.prompt_len) / (o.batch + 1));
    std::vector<int64_t> ids;
    for (int64_t t = 0; t < len; ++t) {
      ids.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab_size)));
    }
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

}  // namespace statickv::demo
