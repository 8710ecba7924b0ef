// statickv-serve: a continuous-batching server over one StaticCache or
// HybridCache (reference::Scheduler). main wires the options (options.hpp)
// to a front: JSON lines on stdin/stdout (lines/; docs/serving.md,
// "statickv-serve") or the OpenAI-compatible HTTP API (http/; "HTTP API").
// End of input drains the queue and exits 0; a refused flag exits 2.

#include "serve/lines/server.hpp"
#include "serve/options.hpp"
#include "serve/report.hpp"
#include "serve/text_tools.hpp"
#ifdef STATICKV_SERVE_HTTP
#include "serve/http/server.hpp"
#endif

#include <statickv/apps/model_flags.hpp>
#include <statickv/engine/scheduler.hpp>
#include <statickv/flags/flags.hpp>
#include <statickv/model/checkpoint.hpp>

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

using namespace statickv;
using namespace statickv::reference;
using serve::Options;

namespace {

std::unique_ptr<LlamaModel> load_model(const Options& o, const apps::TpRole& role,
                                       at::ScalarType dtype) {
  Checkpoint ckpt =
      apps::load_model_weights(o.checkpoint, o.shape, o.seed, role, role.device, dtype);
  return std::make_unique<LlamaModel>(std::move(ckpt.config), std::move(ckpt.weights), role.shard);
}

/// The tokenizer (--tokenizer, else the checkpoint's when it has one; with
/// --http its chat template too); null without one.
std::shared_ptr<serve::TextTools> text_tools(const Options& o) {
  std::string dir = o.tokenizer;
  if (dir.empty() && !o.checkpoint.empty() &&
      std::filesystem::exists(std::filesystem::path(o.checkpoint) / "tokenizer.json")) {
    dir = o.checkpoint;
  }
  if (dir.empty()) return nullptr;
  return serve::load_text_tools(dir, /*chat=*/!o.http.empty());
}

/// JSON lines on stdin and stdout until the input ends.
void serve_lines(Scheduler& scheduler, const apps::TpRole& role,
                 std::shared_ptr<serve::TextTools> text) {
  serve::LineReader reader(std::cin);
  auto local = std::make_unique<serve::LocalInput>(reader);
  std::unique_ptr<serve::Input> input;
  if (role.shard.comm) {  // every rank takes rank 0's lines (stdin of the others is unread)
    input = std::make_unique<serve::SharedInput>(std::move(local), role.shard.comm,
                                                 /*max_wait_s=*/2.0);
  } else {
    input = std::move(local);
  }
  serve::Server server(scheduler, std::move(text), std::cout);
  server.run(*input);
}

/// The HTTP API until SIGTERM (docs/serving.md, "HTTP API").
int serve_http(Scheduler& scheduler, const Options& o, std::shared_ptr<serve::TextTools> text) {
#ifdef STATICKV_SERVE_HTTP
  serve::HttpOptions h;
  h.host = o.http_host;
  h.port = o.http_port;
  h.served_model = o.served_model_name;
  if (h.served_model.empty()) {  // the checkpoint directory's name ("build/smollm2/": smollm2)
    std::filesystem::path dir = std::filesystem::path(o.checkpoint).lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();
    h.served_model = o.checkpoint.empty() ? o.shape : dir.filename().string();
  }
  h.threads = static_cast<int>(o.http_threads);
  h.max_queue = o.max_queue;
  h.gather = std::chrono::milliseconds(o.gather_ms);
  h.api_key = o.api_key;
  h.max_body_bytes = o.max_body_bytes;
  h.max_n = o.max_n > 0 ? o.max_n : o.max_batch;
  h.strict_fields = o.strict_fields;
  h.root = o.checkpoint.empty() ? o.shape : o.checkpoint;
  h.defaults = serve::GenerationDefaults::load(o.checkpoint);
  return serve::serve_http(scheduler, std::move(text), h);
#else
  (void)scheduler, (void)o, (void)text;
  return 2;  // refused in parse (check_http_flags)
#endif
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = serve::parse_options(argc, argv);
  if (o.threads > 0) at::set_num_threads(o.threads);
  if (!o.checkpoint.empty() && !std::filesystem::is_directory(o.checkpoint)) {
    throw flags::FlagError("--checkpoint: expected a directory but got '" + o.checkpoint + "'");
  }
  const apps::TpRole role = apps::start_tp(o.tp, argc, argv, flags::parse_device(o.device));
  if (role.launcher_status) return *role.launcher_status;  // --tp N: the ranks have served
  const at::ScalarType dtype = flags::parse_dtype(o.dtype, role.device, at::kBFloat16);
  std::shared_ptr<serve::TextTools> text = text_tools(o);
  const std::unique_ptr<LlamaModel> model = load_model(o, role, dtype);
  // The draft model drafts on its own cache, whose rows mirror the target's
  // (speculation is refused with --tp, so role.device is the one device).
  const std::unique_ptr<LlamaModel> draft =
      apps::load_draft_model(o.spec, dtype, role.device, static_cast<uint64_t>(o.seed));
  if (draft && draft->config().vocab_size != model->config().vocab_size) {
    throw flags::FlagError(
        fmt::format("{}: expected a draft model with the target's vocab_size={} but got {}",
                    o.spec.draft_shape.empty() ? "--draft-checkpoint" : "--draft-shape",
                    model->config().vocab_size, draft->config().vocab_size));
  }
  SchedulerOptions options = scheduler_options(o, model->config());
  options.draft_model = draft.get();
  Scheduler scheduler(*model, options);
  scheduler.warm_up();  // after this no arrival pattern captures again
  int status = 0;
  if (o.http.empty()) {
    serve_lines(scheduler, role, std::move(text));
  } else {
    status = serve_http(scheduler, o, std::move(text));
  }
  if (role.tp.rank == 0) serve::report(scheduler, o);
  return status;
} catch (...) {
  return flags::fail("statickv-serve");
}
