#pragma once
// statickv-serve --http: the OpenAI-compatible HTTP front (cpp-httplib) over
// SchedulerThread. Routes, authentication, limits and the SSE stream writer live
// here; the protocol is in docs/serving.md ("HTTP API").

#include "metrics.hpp"
#include "request.hpp"
#include "scheduler_thread.hpp"
#include "serve/text_tools.hpp"

#include <statickv/engine/scheduler.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace statickv::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  ///< 0: any free port
  std::string served_model;
  int threads = 128;
  int64_t max_queue = 64;
  /// An idle server's first arrival waits up to this long for others to
  /// start with it (SchedulerThread::gather).
  std::chrono::milliseconds gather{10};
  std::string api_key;  ///< empty: no key asked
  int64_t max_body_bytes = 1 << 20;
  int64_t max_n = 1;           ///< most choices per request (400 past it)
  bool strict_fields = false;  ///< an unknown field is a 400, not ignored
  std::string root;            ///< /v1/models' root: the checkpoint (or the shape)
  GenerationDefaults defaults;
};

/// Serves until SIGTERM or SIGINT, then drains (every request in flight
/// finishes) and returns 0. Prints "statickv-serve: listening on
/// http://HOST:PORT" on stderr once it accepts connections.
int serve_http(reference::Scheduler& scheduler, std::shared_ptr<TextTools> text,
               const HttpOptions& options);

}  // namespace statickv::serve
