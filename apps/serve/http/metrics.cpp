// Prometheus text for statickv-serve --http (metrics.hpp).

#include "metrics.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace statickv::serve {

namespace {

const std::map<std::string, std::string>& help() {
  static const std::map<std::string, std::string> h = {
      {"statickv_requests_total", "Requests the scheduler finished, by outcome."},
      {"statickv_http_responses_total", "HTTP responses, by status."},
      {"statickv_prompt_tokens_total", "Prompt tokens of admitted requests."},
      {"statickv_generation_tokens_total", "Tokens generated and sent."},
      {"statickv_time_to_first_token_seconds", "Arrival to first token, per request."},
      {"statickv_time_per_output_token_seconds", "Time per token after the first, per request."},
      {"statickv_step_seconds", "One scheduler step (a batched forward pass)."},
      {"statickv_http_token_write_seconds",
       "A streamed token produced by the scheduler to its bytes written to the socket."},
      {"statickv_ignored_fields_total",
       "Unknown request fields ignored (--strict-fields refuses)."},
      {"statickv_queue_depth", "Requests waiting for a cache row."},
      {"statickv_rows_in_use", "Cache rows serving a request."},
      {"statickv_rows_total", "Cache rows (--max-batch)."},
  };
  return h;
}

std::string header(const std::string& name, const char* type) {
  const auto it = help().find(name);
  return fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, it != help().end() ? it->second : name,
                     name, type);
}

}  // namespace

Metrics::Metrics()
    : bounds_({0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
               2.5, 5, 10, 30, 60}) {}

void Metrics::count(const std::string& name, const std::string& label, const std::string& value,
                    int64_t by) {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_[name][label + "=\"" + value + "\""] += by;
}

void Metrics::count(const std::string& name, int64_t by) {
  std::lock_guard<std::mutex> lock(mutex_);
  counters_[name][""] += by;
}

void Metrics::set_gauge(const std::string& name, double value) {
  std::lock_guard<std::mutex> lock(mutex_);
  gauges_[name] = value;
}

void Metrics::observe(const std::string& name, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  Histogram& h = histograms_[name];
  if (h.buckets.empty()) h.buckets.assign(bounds_.size(), 0);
  const auto at = std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin();
  if (at < static_cast<std::ptrdiff_t>(bounds_.size())) ++h.buckets[static_cast<size_t>(at)];
  h.sum += seconds;
  ++h.count;
}

double Metrics::mean(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = histograms_.find(name);
  return it == histograms_.end() || it->second.count == 0 ? 0.0 : it->second.sum / it->second.count;
}

std::string Metrics::text() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  for (const auto& [name, series] : counters_) {
    out += header(name, "counter");
    for (const auto& [labels, n] : series) {
      out += labels.empty() ? fmt::format("{} {}\n", name, n)
                            : fmt::format("{}{{{}}} {}\n", name, labels, n);
    }
  }
  for (const auto& [name, value] : gauges_) {
    out += header(name, "gauge") + fmt::format("{} {}\n", name, value);
  }
  for (const auto& [name, h] : histograms_) {
    out += header(name, "histogram");
    int64_t cumulative = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cumulative += h.buckets[i];
      out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
    }
    out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count, name,
                       h.sum, name, h.count);
  }
  return out;
}

}  // namespace statickv::serve
