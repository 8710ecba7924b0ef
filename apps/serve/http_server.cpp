// statickv-serve --http: routes, limits and the SSE writer (http_server.hpp).

#include "http_server.hpp"

#include <httplib.h>
#include <sys/socket.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <random>
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

std::string sse(const json& event) { return "data: " + event.dump() + "\n\n"; }

bool write(httplib::DataSink& sink, const std::string& bytes) {
  return sink.write(bytes.data(), bytes.size());
}

/// Everything one streamed response needs between provider calls.
struct StreamState {
  ResponseHead head;
  std::shared_ptr<Stream> stream;
  bool include_usage = false;
  int64_t prompt_tokens = 0;
  bool first = true, finished = false;
};

class Front {
 public:
  Front(HttpEngine& engine, std::shared_ptr<TextTools> text, const HttpOptions& options,
        int64_t max_len, Metrics& metrics)
      : engine_(engine),
        text_(std::move(text)),
        o_(options),
        max_len_(max_len),
        metrics_(metrics),
        created_(static_cast<int64_t>(std::time(nullptr))) {}

  void routes(httplib::Server& svr);
  /// SIGTERM: new requests get 503; returns once every request in flight
  /// has been answered (streams to their [DONE]).
  void drain();

 private:
  void generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  Submission submission(const ApiRequest& api, ServeClock::time_point arrival);
  std::vector<int64_t> prompt_ids(const ApiRequest& api);
  void answer_whole(const ResponseHead& head, const Submission& s, httplib::Response& res);
  void answer_stream(const ApiRequest& api, const ResponseHead& head, const Submission& s,
                     httplib::Response& res);
  bool write_pieces(StreamState& st, httplib::DataSink& sink);
  bool authorized(const httplib::Request& req) const;

  HttpEngine& engine_;
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
};

bool Front::authorized(const httplib::Request& req) const {
  return o_.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + o_.api_key;
}

std::vector<int64_t> Front::prompt_ids(const ApiRequest& api) {
  if (api.endpoint == Endpoint::kChat || api.prompt_text) {
    const std::string field = api.endpoint == Endpoint::kChat ? "messages" : "prompt";
    if (!text_) {
      throw ApiError(400,
                     field +
                         ": expected token ids: this server has no tokenizer (start it "
                         "with a checkpoint that has tokenizer.json, or --tokenizer)",
                     field);
    }
    try {
      return api.endpoint == Endpoint::kChat ? text_->apply_chat(api.messages_json)
                                             : text_->encode_prompt(*api.prompt_text);
    } catch (const std::exception& e) {
      throw ApiError(400, std::string(field == "messages" ? "" : "prompt: ") + e.what(), field);
    }
  }
  return api.prompt_ids;
}

Submission Front::submission(const ApiRequest& api, ServeClock::time_point arrival) {
  Submission s;
  reference::Request& r = s.request;
  r.prompt = prompt_ids(api);
  const auto prompt = static_cast<int64_t>(r.prompt.size());  // empty: the engine refuses it
  const int64_t room = max_len_ - prompt;
  if (room < 1) {
    throw ApiError(400,
                   "prompt: expected at most " + std::to_string(max_len_ - 1) +
                       " tokens (--max-len " + std::to_string(max_len_) + ") but got " +
                       std::to_string(prompt),
                   api.endpoint == Endpoint::kChat ? "messages" : "prompt");
  }
  const std::string& max_field = api.max_tokens_field;
  if (api.max_tokens && *api.max_tokens > room) {
    throw ApiError(400,
                   max_field + ": expected prompt tokens (" + std::to_string(prompt) + ") + " +
                       max_field + " <= " + std::to_string(max_len_) + " (--max-len) but got " +
                       std::to_string(*api.max_tokens),
                   max_field);
  }
  const int64_t fallback = api.endpoint == Endpoint::kChat ? room : 16;
  r.max_new_tokens =
      api.max_tokens.value_or(std::min(room, o_.defaults.max_new_tokens.value_or(fallback)));
  r.sampling.temperature = api.temperature.value_or(o_.defaults.temperature);
  if (r.sampling.temperature > 0) {  // temperature 0 is greedy: the filters do not apply
    r.sampling.top_p = api.top_p.value_or(o_.defaults.top_p);
    r.sampling.top_k = api.top_k.value_or(o_.defaults.top_k);
  }
  if (api.seed) {
    r.sampling.seed = *api.seed;
  } else {
    std::lock_guard<std::mutex> lock(seed_mutex_);
    r.sampling.seed = seeds_();
  }
  if (!api.stop.empty() && !text_) {
    throw ApiError(400, "stop: expected no stop strings: this server has no tokenizer", "stop");
  }
  s.stop = api.stop;
  r.id = std::to_string(next_id_++);
  r.arrival = arrival;
  s.stream = std::make_shared<Stream>();
  return s;
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
    const ApiRequest api = parse_request(endpoint, req.body, o_.served_model);
    const Submission s = submission(api, arrival);
    const ResponseHead head{endpoint,
                            (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + s.request.id,
                            o_.served_model, static_cast<int64_t>(std::time(nullptr))};
    engine_.submit(Submission(s));  // s stays: the answer names its prompt
    s.stream->wait_accepted();
    if (api.stream) {
      answer_stream(api, head, s, res);
      streaming = true;  // in flight until the stream is released
    } else {
      answer_whole(head, s, res);
    }
  } catch (const ApiError& e) {
    send_error(res, e);
  }
  if (!streaming) --in_flight_;
}

void Front::answer_whole(const ResponseHead& head, const Submission& s, httplib::Response& res) {
  std::string text;
  std::vector<int64_t> ids;
  std::optional<Stream::End> end;
  while (!end) {
    for (Stream::Piece& p : s.stream->next(std::chrono::seconds(1), &end)) {
      text += p.text;
      ids.insert(ids.end(), p.ids.begin(), p.ids.end());
    }
  }
  if (end->finish == "error") {
    send_error(res, ApiError(500, end->error, "", "server_error"));
    return;
  }
  const Usage usage{static_cast<int64_t>(s.request.prompt.size()), end->completion_tokens};
  res.set_content(response_body(head, text, ids, end->finish, usage, s.request.prompt).dump(),
                  "application/json");
}

void Front::answer_stream(const ApiRequest& api, const ResponseHead& head, const Submission& s,
                          httplib::Response& res) {
  auto st = std::make_shared<StreamState>();
  st->head = head;
  st->stream = s.stream;
  st->include_usage = api.include_usage;
  st->prompt_tokens = static_cast<int64_t>(s.request.prompt.size());
  const std::string id = s.request.id;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st](size_t, httplib::DataSink& sink) { return write_pieces(*st, sink); },
      [this, st, id](bool) {
        if (!st->finished) engine_.cancel(id);  // the client went away: free its row
        --in_flight_;
      });
}

bool Front::write_pieces(StreamState& st, httplib::DataSink& sink) {
  if (st.first && st.head.endpoint == Endpoint::kChat) {
    if (!write(sink, sse(stream_chunk(st.head, "", {}, true, std::nullopt)))) return false;
  }
  st.first = false;
  std::optional<Stream::End> end;
  for (const Stream::Piece& p : st.stream->next(std::chrono::milliseconds(100), &end)) {
    if (!write(sink, sse(stream_chunk(st.head, p.text, p.ids, false, std::nullopt)))) return false;
    const double seconds = std::chrono::duration<double>(ServeClock::now() - p.produced).count();
    for (size_t i = 0; i < p.ids.size(); ++i) {
      metrics_.observe("statickv_http_token_write_seconds", seconds);
    }
  }
  if (!end) return sink.is_writable();
  std::string tail;
  if (end->finish == "error") {
    tail = sse(json::parse(error_body(ApiError(500, end->error, "", "server_error"))));
  } else {
    tail = sse(stream_chunk(st.head, "", {}, false, end->finish));
    if (st.include_usage)
      tail += sse(usage_chunk(st.head, {st.prompt_tokens, end->completion_tokens}));
  }
  tail += "data: [DONE]\n\n";
  st.finished = true;  // the engine is done with it, whatever the socket says
  if (!write(sink, tail)) return false;
  sink.done();
  return true;
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
    res.set_content(models_body(o_.served_model, created_).dump(), "application/json");
  });
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
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    svr.Get(path, wrong_method("POST"));
    svr.Put(path, wrong_method("POST"));
    svr.Delete(path, wrong_method("POST"));
  }
  for (const char* path : {"/v1/models", "/health", "/metrics"}) {
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
          ": no such route (/v1/completions, /v1/chat/completions, /v1/models, /health, /metrics)";
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

int serve_http(reference::Scheduler& engine, std::shared_ptr<TextTools> text,
               const HttpOptions& options) {
  install_signal_handlers();
  Metrics metrics;
  HttpEngine loop(engine, text, metrics, options.max_queue);
  Front front(loop, std::move(text), options, engine.options().max_len, metrics);
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
