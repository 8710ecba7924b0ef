// statickv-serve --http: routes, limits and the SSE writer (server.hpp).

#include "server.hpp"

#include "answer.hpp"
#include "plan.hpp"
#include "response.hpp"

#include <httplib.h>
#include <sys/socket.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <functional>
#include <random>
#include <set>
#include <thread>

namespace statickv::serve {

using nlohmann::json;
using reference::ServeClock;

namespace {

std::atomic<bool> g_stop_requested{false};

extern "C" void on_stop_signal(int) { g_stop_requested = true; }

void install_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is a failed write, not a signal
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 503) res.set_header("Retry-After", "1");
  res.set_content(error_body(e), "application/json");
}

bool write(httplib::DataSink& sink, const std::string& bytes) {
  return sink.write(bytes.data(), bytes.size());
}

/// One streamed response between provider calls.
struct StreamState {
  Plan plan;
  std::optional<StreamAnswer> answer;
  bool opened = false, finished = false;
};

class Front {
 public:
  Front(SchedulerThread& scheduler, std::shared_ptr<TextTools> text, const HttpOptions& options,
        int64_t max_len, Metrics& metrics)
      : scheduler_(scheduler),
        text_(std::move(text)),
        o_(options),
        max_len_(max_len),
        metrics_(metrics),
        created_(static_cast<int64_t>(std::time(nullptr))) {
    metrics_.count("statickv_ignored_fields_total", 0);
  }

  void routes(httplib::Server& svr);
  /// SIGTERM: new requests get 503; returns once every request in flight
  /// has been answered (streams to their [DONE]).
  void drain();

 private:
  void generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void note_ignored(const std::vector<std::string>& fields);
  uint64_t request_seed(const ApiRequest& api);
  void answer_stream(const ApiRequest& api, const ResponseHead& head, Plan plan,
                     httplib::Response& res);
  bool write_events(StreamState& st, httplib::DataSink& sink);
  void tokenizer_routes(httplib::Server& svr);
  TokenText token_text() const;
  bool authorized(const httplib::Request& req) const;

  SchedulerThread& scheduler_;
  std::shared_ptr<TextTools> text_;
  const HttpOptions& o_;
  int64_t max_len_;
  Metrics& metrics_;
  int64_t created_;
  std::atomic<int64_t> next_id_{0};
  std::atomic<int64_t> in_flight_{0};  // generate() calls and streams not yet released
  std::atomic<bool> draining_{false};
  std::mutex seed_mutex_;
  std::mt19937_64 seeds_{std::random_device{}()};
  std::mutex ignored_mutex_;
  std::set<std::string> ignored_;  // unknown field names logged so far
};

bool Front::authorized(const httplib::Request& req) const {
  return o_.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + o_.api_key;
}

TokenText Front::token_text() const {
  if (!text_) return [](int64_t id) { return id_text(id); };
  return [text = text_](int64_t id) { return text->token_text(id); };
}

/// Field policy (docs/serving.md): an unknown field is ignored, logged the
/// first time its name is seen and counted in /metrics.
void Front::note_ignored(const std::vector<std::string>& fields) {
  for (const std::string& field : fields) {
    metrics_.count("statickv_ignored_fields_total", 1);
    std::lock_guard<std::mutex> lock(ignored_mutex_);
    if (!ignored_.insert(field).second) continue;
    std::fprintf(stderr,
                 "statickv-serve: ignoring the unknown request field '%s' (--strict-fields "
                 "refuses it)\n",
                 field.c_str());
  }
}

uint64_t Front::request_seed(const ApiRequest& api) {
  if (api.seed) return *api.seed;
  std::lock_guard<std::mutex> lock(seed_mutex_);
  return seeds_();
}

void Front::drain() {
  draining_ = true;
  while (in_flight_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

void Front::generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  const auto arrival = ServeClock::now();
  // Counted before the drain check, so drain() never misses a request that passed it.
  ++in_flight_;
  bool streaming = false;
  try {
    if (draining_) {
      throw ApiError(503, "server shutting down (SIGTERM): it takes no new requests", "",
                     "server_error", "shutting_down");
    }
    const ApiRequest api = parse_request(endpoint, req.body, o_.served_model, o_.strict_fields);
    note_ignored(api.ignored);
    const std::string id = std::to_string(next_id_++);
    Plan plan = plan_request(api, {text_.get(), o_, max_len_}, request_seed(api), id, arrival);
    const ResponseHead head{endpoint, (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + id,
                            o_.served_model, static_cast<int64_t>(std::time(nullptr))};
    scheduler_.submit(plan.submission);  // the plan keeps its copy: the answer names its prompts
    plan.submission.stream->wait_accepted();
    if (api.stream) {
      answer_stream(api, head, std::move(plan), res);
      streaming = true;  // in flight until the stream is released
    } else {
      res.set_content(json_text(whole_answer(plan, head, token_text())), "application/json");
    }
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const std::exception& e) {  // a bug, not the client's: answered, never leaked
    send_error(res, ApiError(500, std::string("server error: ") + e.what(), "", "server_error"));
  }
  if (!streaming) --in_flight_;
}

void Front::answer_stream(const ApiRequest& api, const ResponseHead& head, Plan plan,
                          httplib::Response& res) {
  auto st = std::make_shared<StreamState>();
  st->plan = std::move(plan);
  st->answer.emplace(st->plan, head, token_text(), api.include_usage, api.continuous_usage);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st](size_t, httplib::DataSink& sink) { return write_events(*st, sink); },
      [this, st](bool) {
        // The client went away, or a choice failed: free the rows still serving it.
        if (!st->finished || st->answer->failed()) {
          for (const reference::Request& r : st->plan.submission.choices) scheduler_.cancel(r.id);
        }
        --in_flight_;
      });
}

bool Front::write_events(StreamState& st, httplib::DataSink& sink) {
  if (!st.opened) {
    st.opened = true;
    const std::string opening = st.answer->opening();
    if (!opening.empty() && !write(sink, opening)) return false;
  }
  const Stream::Batch batch = st.plan.submission.stream->next(std::chrono::milliseconds(100));
  const std::string events = st.answer->events(batch);
  for (const Stream::Piece& p : batch.pieces) {
    const double seconds = std::chrono::duration<double>(ServeClock::now() - p.produced).count();
    for (size_t i = 0; i < p.ids.size(); ++i) {
      metrics_.observe("statickv_http_token_write_seconds", seconds);
    }
  }
  if (!st.answer->done()) return events.empty() ? sink.is_writable() : write(sink, events);
  st.finished = true;  // the engine is done with it, whatever the socket says
  if (!write(sink, events)) return false;
  sink.done();
  return true;
}

/// vLLM's tokenizer routes, as lm-evaluation-harness's remote tokenizer
/// calls them (docs/serving.md, "Routes"); without a tokenizer each answers
/// 404 naming it, so such clients fall back to their own.
void Front::tokenizer_routes(httplib::Server& svr) {
  const auto tokenizer = [this]() -> TextTools& {
    if (!text_) {
      throw ApiError(404,
                     "tokenizer: expected a server with a tokenizer (tokenizer.json) but it "
                     "has none",
                     "", "not_found");
    }
    return *text_;
  };
  const auto answer = [](httplib::Response& res, const std::function<json()>& body) {
    try {
      res.set_content(json_text(body()), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  };
  svr.Post("/tokenize", [=](const httplib::Request& req, httplib::Response& res) {
    answer(res, [&] {
      const TokenizeRequest r = parse_tokenize(req.body);
      TextTools& text = tokenizer();
      std::vector<int64_t> ids;
      try {
        ids = r.prompt
                  ? (r.add_special_tokens ? text.encode_prompt(*r.prompt) : text.encode(*r.prompt))
                  : text.apply_chat(r.messages_json);
      } catch (const std::exception& e) {
        throw ApiError(400, std::string(r.prompt ? "prompt: " : "") + e.what(),
                       r.prompt ? "prompt" : "messages");
      }
      return json{{"count", ids.size()}, {"max_model_len", max_len_}, {"tokens", ids}};
    });
  });
  svr.Post("/detokenize", [=](const httplib::Request& req, httplib::Response& res) {
    answer(res, [&] {
      const std::vector<int64_t> ids = parse_detokenize(req.body);
      TextTools& text = tokenizer();
      try {
        return json{{"prompt", text.decode(ids)}};
      } catch (const std::exception& e) {
        throw ApiError(400, std::string("tokens: ") + e.what(), "tokens");
      }
    });
  });
  svr.Get("/tokenizer_info", [=](const httplib::Request&, httplib::Response& res) {
    answer(res, [&] {
      TextTools& text = tokenizer();
      const std::string eos = text.eos_token();
      return json{{"tokenizer_class", "statickv"},
                  {"eos_token", eos.empty() ? json(nullptr) : json(eos)},
                  {"bos_token", nullptr},
                  {"pad_token", nullptr},
                  {"model_max_length", max_len_}};
    });
  });
}

void Front::routes(httplib::Server& svr) {
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/v1/", 0) != 0 || authorized(req))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res,
               ApiError(401,
                        "Authorization: expected 'Bearer <key>' with the server's "
                        "--api-key but got " +
                            std::string(req.has_header("Authorization") ? "another key" : "none"),
                        "", "authentication_error", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(Endpoint::kCompletions, req, res);
  });
  svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(Endpoint::kChat, req, res);
  });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(json_text(models_body(o_.served_model, created_, o_.root, max_len_)),
                    "application/json");
  });
  tokenizer_routes(svr);
  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.text(), "text/plain; version=0.0.4");
  });
  const auto wrong_method = [](const char* allow) {
    return [allow](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allow);
      send_error(res, ApiError(405, req.method + " " + req.path + ": expected " + allow));
    };
  };
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"}) {
    svr.Get(path, wrong_method("POST"));
    svr.Put(path, wrong_method("POST"));
    svr.Delete(path, wrong_method("POST"));
  }
  for (const char* path : {"/v1/models", "/health", "/metrics", "/tokenizer_info"}) {
    svr.Post(path, wrong_method("GET"));
  }
}

/// Bodies for the answers httplib makes itself (404, 413, 400 for a body
/// cut short); counts every response by status.
void error_answers(httplib::Server& svr, Metrics& metrics) {
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string what = req.method + " " + req.path;
    if (res.status == 404)
      what +=
          ": no such route (/v1/completions, /v1/chat/completions, /v1/models, /tokenize, "
          "/detokenize, /tokenizer_info, /health, /metrics)";
    if (res.status == 413) what = "body: expected at most --max-body-bytes but got more";
    if (res.status == 400) what = "body: the request could not be read";
    res.set_content(error_body(ApiError(res.status, what, "",
                                        res.status == 404 ? "not_found" : "invalid_request_error")),
                    "application/json");
  });
  svr.set_logger([&metrics](const httplib::Request&, const httplib::Response& res) {
    metrics.count("statickv_http_responses_total", "status", std::to_string(res.status));
  });
}

}  // namespace

int serve_http(reference::Scheduler& scheduler, std::shared_ptr<TextTools> text,
               const HttpOptions& options) {
  install_signal_handlers();
  Metrics metrics;
  SchedulerThread loop(scheduler, text, metrics, options.max_queue, options.gather);
  Front front(loop, std::move(text), options, scheduler.options().max_len, metrics);
  httplib::Server svr;
  svr.new_task_queue = [n = options.threads] {
    return new httplib::ThreadPool(static_cast<size_t>(n));
  };
  svr.set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
  svr.set_keep_alive_timeout(2);  // an idle connection holds a thread at most this long
  front.routes(svr);
  error_answers(svr, metrics);
  // cpp-httplib listens with a backlog of 5 (compiled into Debian's
  // library), which resets connections when many clients connect at once:
  // keep the listening socket and listen again with the system's maximum.
  int listen_fd = -1;
  svr.set_socket_options([&listen_fd](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd = sock;
  });
  const int port = options.port == 0
                       ? svr.bind_to_any_port(options.host)
                       : (svr.bind_to_port(options.host, options.port) ? options.port : -1);
  if (port >= 0 && listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  if (port < 0) {
    std::fprintf(stderr, "statickv-serve: --http: cannot listen on %s:%d\n", options.host.c_str(),
                 options.port);
    return 1;
  }
  std::atomic<bool> listening_done{false};
  std::thread listener([&] {
    svr.listen_after_bind();
    listening_done = true;
  });
  std::fprintf(stderr, "statickv-serve: listening on http://%s:%d\n", options.host.c_str(), port);
  std::fflush(stderr);
  std::thread watcher([&] {  // SIGTERM: refuse new requests, finish those in flight, stop
    while (!g_stop_requested && !listening_done)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    front.drain();
    svr.stop();
    loop.stop([&] { return listening_done.load(); });
  });
  loop.run();
  watcher.join();
  listener.join();
  return 0;
}

}  // namespace statickv::serve
