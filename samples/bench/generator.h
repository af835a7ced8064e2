// The generated checkpoints llm-bench measures come from llm-make-bench-model
// (tools/make_bench_model), a separate program: writing safetensors files needs engine code that
// the public header does not offer and that llm-bench does not link. This runs it.
#ifndef LLMRT_SAMPLES_BENCH_GENERATOR_H_
#define LLMRT_SAMPLES_BENCH_GENERATOR_H_

#include <cstdint>
#include <string>
#include <utility>

#include "common.h"

namespace llm_bench {

// A generated model as the generator describes it.
struct GeneratedModel {
  int64_t vocab = 0;
  double weight_bytes_per_token = 0;  // weights one decode step reads at batch 1
  int64_t index_topk = 0;             // the DSA indexer's selection size (context-glm5)
};

class ModelGenerator {
 public:
  // The generator to run: `path` when not empty (--generator), else llm-make-bench-model beside
  // this executable, else where the build tree put it, else the name looked up on PATH.
  static ModelGenerator Find(const std::string& path);

  // Layers and hidden width of the "k2", "glm45" and "glm5" presets (default 4 and 4096).
  void SetSize(int layers, int hidden) {
    layers_ = layers;
    hidden_ = hidden;
  }

  // Routed experts of the presets (0: the preset's own; the "-real" presets default to 8).
  void SetExperts(int experts) { experts_ = experts; }

  // Writes only config.json of `preset` in `weights` to `dir` (--synthetic: the runtime makes
  // the weights) and describes the model; presets as Ensure, plus "k2-real", "glm5-real" and
  // "glm45-real" (the released layer shapes).
  bool EnsureConfig(const fs::path& dir, const std::string& preset, const std::string& weights,
                    GeneratedModel* out) const;

  // Writes the checkpoint of `preset` ("k2", "glm45", "glm5": Kimi K2, GLM-4.5 and GLM-5 layer
  // structures at the size SetSize chose; "context-k2", "context-glm5", "context-glm45") in
  // `weights` to `dir` unless it is there already with the same config.json (the generator
  // decides; it prints a line to stderr when it writes), and describes it. False with a message
  // printed when the generator cannot be run or fails.
  bool Ensure(const fs::path& dir, const std::string& preset, const std::string& weights,
              GeneratedModel* out) const;

  // Describes the model of `preset` in `weights` without writing anything.
  bool Describe(const std::string& preset, const std::string& weights, GeneratedModel* out) const;

  // Describes any checkpoint directory (--model): vocabulary and the weight bytes one decode step
  // at batch 1 reads, from its config.json and safetensors headers.
  bool DescribeDir(const fs::path& dir, GeneratedModel* out) const;

 private:
  explicit ModelGenerator(std::string path) : path_(std::move(path)) {}
  bool Run(const std::string& args, GeneratedModel* out) const;
  std::string SizeArgs(const std::string& preset) const;

  std::string path_;
  int layers_ = 4, hidden_ = 4096, experts_ = 0;
};

}  // namespace llm_bench

#endif  // LLMRT_SAMPLES_BENCH_GENERATOR_H_
