#include "generator.h"

#include <sys/wait.h>

#include <cstdio>
#include <system_error>

#include "nlohmann/json.hpp"

namespace llm_bench {

namespace {

constexpr const char* kGeneratorName = "llm-make-bench-model";

// `s` as one word for /bin/sh.
std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

ModelGenerator ModelGenerator::Find(const std::string& path) {
  if (!path.empty()) return ModelGenerator(path);
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = self.parent_path() / kGeneratorName;
    if (fs::exists(beside, ec)) return ModelGenerator(beside.string());
  }
#ifdef LLMRT_BENCH_GENERATOR
  if (fs::exists(LLMRT_BENCH_GENERATOR, ec)) return ModelGenerator(LLMRT_BENCH_GENERATOR);
#endif
  return ModelGenerator(kGeneratorName);
}

bool ModelGenerator::Ensure(const fs::path& dir, const std::string& preset, const std::string& weights,
                            GeneratedModel* out) const {
  return Run("--dir " + ShellQuote(dir.string()) + " --preset " + ShellQuote(preset) + " --weights " +
                 ShellQuote(weights) + SizeArgs(preset),
             out);
}

bool ModelGenerator::EnsureConfig(const fs::path& dir, const std::string& preset, const std::string& weights,
                                  GeneratedModel* out) const {
  return Run("--config-only " + ShellQuote(dir.string()) + " --preset " + ShellQuote(preset) + " --weights " +
                 ShellQuote(weights) + SizeArgs(preset),
             out);
}

bool ModelGenerator::Describe(const std::string& preset, const std::string& weights, GeneratedModel* out) const {
  return Run("--describe --preset " + ShellQuote(preset) + " --weights " + ShellQuote(weights) + SizeArgs(preset),
             out);
}

bool ModelGenerator::DescribeDir(const fs::path& dir, GeneratedModel* out) const {
  return Run("--describe-dir " + ShellQuote(dir.string()), out);
}

// The context presets have fixed sizes.
std::string ModelGenerator::SizeArgs(const std::string& preset) const {
  if (preset.rfind("context-", 0) == 0) return "";
  std::string args = " --layers " + std::to_string(layers_) + " --hidden " + std::to_string(hidden_);
  if (experts_ > 0) args += " --experts " + std::to_string(experts_);
  return args;
}

// Runs the generator with `args` (its stderr goes to ours) and parses the JSON line it prints.
bool ModelGenerator::Run(const std::string& args, GeneratedModel* out) const {
  const std::string cmd = ShellQuote(path_) + " " + args;
  std::fflush(stdout);
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    std::fprintf(stderr, "llm-bench: cannot start %s\n", cmd.c_str());
    return false;
  }
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) text.append(buf, n);
  const int status = pclose(p);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "llm-bench: the checkpoint generator failed: %s\n", cmd.c_str());
    // 127: the shell found no such program.
    if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 127) {
      std::fprintf(stderr, "llm-bench: build the %s target or pass --generator PATH\n", kGeneratorName);
    }
    return false;
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("vocab") || !j.contains("weight_bytes_per_token") || !j.contains("index_topk")) {
    std::fprintf(stderr, "llm-bench: unexpected output of %s: %s\n", cmd.c_str(), text.c_str());
    return false;
  }
  out->vocab = j["vocab"].get<int64_t>();
  out->weight_bytes_per_token = j["weight_bytes_per_token"].get<double>();
  out->index_topk = j["index_topk"].get<int64_t>();
  return true;
}

}  // namespace llm_bench
