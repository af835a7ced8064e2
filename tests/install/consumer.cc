// A C++ host program built outside the tree against an installed llmrt (find_package): the same
// greedy continuation through RAII handles.
// usage: consumer_cxx MODEL_DIR EXPECTED_IDS (comma separated)
#include <llmrt/llmrt.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace {

struct RuntimeDeleter {
  void operator()(llm_runtime* r) const { llm_runtime_destroy(r); }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  llm_runtime_options o;
  llm_runtime_options_init(&o);
  o.kv_dtype = LLM_KV_DTYPE_F32;
  llm_runtime* raw = nullptr;
  if (llm_runtime_create(argv[1], &o, &raw) != LLM_OK) {
    std::cerr << "create: " << llm_last_error() << "\n";
    return 1;
  }
  std::unique_ptr<llm_runtime, RuntimeDeleter> rt(raw);
  llm_session* s = nullptr;
  const std::vector<int32_t> prompt = {0, 17, 42, 99, 3, 250, 7};
  if (llm_session_create(rt.get(), nullptr, &s) != LLM_OK ||
      llm_session_append_tokens(s, prompt.data(), prompt.size()) != LLM_OK) {
    return 1;
  }
  std::string got;
  int n = 0;
  for (int step = 0; n < 9 && step < 64; ++step) {
    llm_step_result r;
    size_t count = 0;
    if (llm_decode_step(rt.get(), &r, 1, &count) != LLM_OK || count != 1 || r.status != LLM_OK) return 1;
    if (r.token == LLM_TOKEN_NONE) continue;
    got += (n++ ? "," : "") + std::to_string(r.token);
  }
  std::cout << "llmrt " << llm_version() << " (C++): " << got << "\n";
  return got == argv[2] ? 0 : 1;
}
