// statickv's side of the Hugging Face comparison (benchmarks/hf_compare.py):
// a long-lived greedy server over the reference decoder, driven by JSON
// lines on stdin so the Python driver can interleave it with Hugging Face
// generation in one run.
//
//   statickv_bench_serve --checkpoint DIR | --shape S  [--device D] [--dtype T]
//                        [--mode eager|bucketed] [--max-len N]
//
// Protocol: after loading it prints {"ready": true, ...}. Each input line
// {"prompt": [ids...], "new_tokens": N} is answered by one line
// {"tokens": [...], "first_token_s": ..., "decode_s": ..., "decode_steps": ...,
//  "captures": ..., "capture_s": ...} (captures so far, both runners). An
// empty line or {"quit": true} ends it. Errors are answered {"error": "..."}.

#include "bench_model.hpp"

#include <statickv/reference/checkpoint.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

using namespace statickv;
using namespace statickv::bench;

int main(int argc, char** argv) try {
  std::string checkpoint, shape = "tiny", device_name = "auto", dtype_text, mode_text = "bucketed";
  int64_t max_len = 2048;
  int threads = 0;
  Flags flags("statickv_bench_serve",
              "greedy generation server for hf_compare.py (JSON lines on stdin/stdout)");
  flags.add("--checkpoint DIR", &checkpoint, "Hugging Face checkpoint directory (else --shape)");
  add_shape_flag(flags, &shape, "random-weight model shape when no checkpoint");
  flags.add_device(&device_name);
  flags.add_dtype(&dtype_text, at::kBFloat16);
  flags.add_choice("--mode M", &mode_text, {"eager", "bucketed", "graphs", "per-length"},
                   "eager, bucketed (graphs on CUDA; 'graphs' is the same) or per-length");
  flags.add("--max-len N", &max_len, "cache capacity", /*min=*/2);
  add_threads_flag(flags, &threads);
  flags.parse(argc, argv);
  set_threads(threads);
  const at::Device device = parse_device(device_name);
  const at::ScalarType dtype = parse_dtype(dtype_text, device, at::kBFloat16);
  const ServeMode mode = parse_serve_mode(mode_text);

  const auto start = Clock::now();
  std::unique_ptr<reference::LlamaModel> model;
  if (!checkpoint.empty()) {
    reference::Checkpoint ckpt = reference::load_checkpoint(checkpoint, dtype, device);
    model =
        std::make_unique<reference::LlamaModel>(std::move(ckpt.config), std::move(ckpt.weights));
  } else {
    model = random_model(shape, dtype, device);
  }
  if (model->config().has_sliding()) {
    throw FlagError(
        "--checkpoint: expected a model whose layers all attend in full (served "
        "through a StaticCache) but " +
        checkpoint + " has sliding-window layers");
  }
  reference::Generator session(*model, serve_options(mode, max_len), /*max_batch=*/1, max_len);
  std::cout << Json::object({{"ready", true},
                             {"load_s", seconds_since(start, device)},
                             {"mode", to_string(mode)},
                             {"graphs", session.uses_graphs()},
                             {"environment", environment(device)}})
                   .dump()
            << std::endl;

  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) break;
    Json reply;
    try {
      const nlohmann::json request = nlohmann::json::parse(line);
      if (request.value("quit", false)) break;
      const auto prompt = request.at("prompt").get<std::vector<int64_t>>();
      const int64_t new_tokens = request.value("new_tokens", static_cast<int64_t>(16));
      if (new_tokens < 1) {
        throw std::invalid_argument("new_tokens: expected >= 1 but got " +
                                    std::to_string(new_tokens));
      }
      const reference::GenerateResult served = session.generate({prompt}, new_tokens);
      const RunnerStats pre = session.prefill_stats();
      const RunnerStats dec = session.decode_stats();
      reply = Json::object({{"tokens", served.tokens[0]},
                            {"first_token_s", served.prefill_seconds},
                            {"decode_s", served.decode_seconds},
                            {"decode_steps", served.decode_steps},
                            {"captures", pre.captures + dec.captures},
                            {"capture_s", pre.capture_seconds + dec.capture_seconds}});
    } catch (const std::exception& e) {
      reply = Json::object({{"error", e.what()}});
    }
    std::cout << reply.dump() << std::endl;
  }
  return 0;
} catch (...) {
  return apps::fail("statickv_bench_serve");
}
