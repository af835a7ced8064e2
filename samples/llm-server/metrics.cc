#include "metrics.h"

#include <cmath>
#include <cstdio>
#include <utility>

namespace llm_server {
namespace {

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.9g", v);
  }
  return buf;
}

void Header(const std::string& name, const std::string& type, const std::string& help, std::string* out) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::Render(const std::string& name, const std::string& help, std::string* out) const {
  Header(name, "histogram", help, out);
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? Number(bounds_[i]) : "+Inf";
    *out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  *out += name + "_sum " + Number(sum_) + "\n";
  *out += name + "_count " + std::to_string(count_) + "\n";
}

void LabelledCounter::Add(const std::string& labels, uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[labels] += n;
}

uint64_t LabelledCounter::Get(const std::string& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(labels);
  return it == values_.end() ? 0 : it->second;
}

void LabelledCounter::Render(const std::string& name, const std::string& help, std::string* out) const {
  Header(name, "counter", help, out);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [labels, v] : values_) *out += name + "{" + labels + "} " + std::to_string(v) + "\n";
}

void RenderScalar(const std::string& name, const std::string& type, const std::string& help, double value,
                  std::string* out) {
  Header(name, type, help, out);
  *out += name + " " + Number(value) + "\n";
}

std::string EscapeLabel(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace llm_server
