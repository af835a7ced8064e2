// Prometheus text exposition (format 0.0.4) helpers: a histogram with fixed buckets and labelled
// counters, each safe to update from any thread.
#ifndef LLMRT_SAMPLES_LLM_SERVER_METRICS_H_
#define LLMRT_SAMPLES_LLM_SERVER_METRICS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace llm_server {

class Histogram {
 public:
  // `bounds`: the upper bounds of the buckets in increasing order (+Inf is added).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // Appends the HELP/TYPE lines and the _bucket, _sum and _count samples of `name`.
  void Render(const std::string& name, const std::string& help, std::string* out) const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Counters keyed by one label set, e.g. {endpoint="/v1/completions",code="200"}.
class LabelledCounter {
 public:
  void Add(const std::string& labels, uint64_t n = 1);
  uint64_t Get(const std::string& labels) const;
  void Render(const std::string& name, const std::string& help, std::string* out) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> values_;
};

// One sample line with its HELP and TYPE ("counter" or "gauge").
void RenderScalar(const std::string& name, const std::string& type, const std::string& help, double value,
                  std::string* out);

// A label value escaped as the exposition format wants (backslash, quote, newline).
std::string EscapeLabel(const std::string& value);

}  // namespace llm_server

#endif  // LLMRT_SAMPLES_LLM_SERVER_METRICS_H_
