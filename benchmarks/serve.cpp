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
  flags.add("--checkpoint", &checkpoint, "Hugging Face checkpoint directory (else --shape)");
  flags.add("--shape", &shape, "random-weight model shape when no checkpoint");
  flags.add("--device", &device_name, "auto, cpu or cuda");
  flags.add("--dtype", &dtype_text, "fp32, fp16 or bf16 (default fp32 on cpu, bf16 on cuda)");
  flags.add("--mode", &mode_text, "eager, bucketed (graphs on CUDA) or per-length");
  flags.add("--max-len", &max_len, "cache capacity");
  flags.add("--threads", &threads, "CPU threads (0: LibTorch's choice)");
  flags.parse(argc, argv);
  if (threads > 0) at::set_num_threads(threads);
  const at::Device device = parse_device(device_name);
  const at::ScalarType dtype =
      parse_dtype(dtype_text.empty() ? (device.is_cuda() ? "bf16" : "fp32") : dtype_text);

  const auto start = Clock::now();
  std::unique_ptr<reference::LlamaModel> model;
  if (!checkpoint.empty()) {
    reference::Checkpoint ckpt = reference::load_checkpoint(checkpoint, dtype, device);
    model =
        std::make_unique<reference::LlamaModel>(std::move(ckpt.config), std::move(ckpt.weights));
  } else {
    model = random_model(shape, dtype, device);
  }
  const ServeMode mode = parse_serve_mode(mode_text);
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
} catch (const std::exception& e) {
  std::fprintf(stderr, "statickv_bench_serve: %s\n", e.what());
  return 2;
}
