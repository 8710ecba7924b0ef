#pragma once
// statickv-serve --http's GET /metrics: counters, gauges and histograms in
// Prometheus' text format (version 0.0.4), updated from any thread.
// docs/serving.md lists the names.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace statickv::serve {

class Metrics {
 public:
  Metrics();
  /// A counter `name` with one label (e.g. requests_total{outcome="stop"}).
  void count(const std::string& name, const std::string& label, const std::string& value,
             int64_t by = 1);
  /// A counter without labels.
  void count(const std::string& name, int64_t by = 1);
  void set_gauge(const std::string& name, double value);
  /// One observation of histogram `name` (seconds).
  void observe(const std::string& name, double seconds);
  /// The mean of histogram `name` (0 when empty).
  double mean(const std::string& name) const;
  /// Everything, for GET /metrics.
  std::string text() const;

 private:
  struct Histogram {
    std::vector<int64_t> buckets;  // cumulative counts are formed in text()
    double sum = 0;
    int64_t count = 0;
  };
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::map<std::string, std::map<std::string, int64_t>> counters_;  // name -> labels -> n
  std::map<std::string, double> gauges_;
  std::map<std::string, Histogram> histograms_;
};

}  // namespace statickv::serve
