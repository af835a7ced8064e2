// Hostile model directories through the public header: files that are not regular files.
#include <sys/stat.h>

#include <string>

#include "gtest/gtest.h"
#include "llmrt/llmrt.h"
#include "tests/hostile/hostile_util.h"

namespace llmrt::hostile {
namespace {

const std::string kData = LLMRT_TEST_DATA;

// A FIFO named model.safetensors (or a shard) must be refused, not opened and waited on.
TEST(HostileModelDir, FifoInsteadOfSafetensorsIsAnErrorNotAHang) {
  const std::string dir = MakeTempDir("fifo");
  CopyDir(kData + "/tiny_kimi_k2_qlora_yarn", dir);
  ::unlink((dir + "/model.safetensors").c_str());
  ASSERT_EQ(::mkfifo((dir + "/model.safetensors").c_str(), 0600), 0);
  EXPECT_EQ(RunIsolated([&] {
              llm_runtime* rt = nullptr;
              const llm_status st = llm_runtime_create(dir.c_str(), nullptr, &rt);
              if (rt != nullptr) llm_runtime_destroy(rt);
              return ExpectStatus(st, LLM_ERR_IO, "runtime_create over a FIFO");
            }, /*timeout_s=*/20),
            "");
}

TEST(HostileModelDir, FifoInsteadOfConfigOrTokenizerIsAnErrorNotAHang) {
  for (const char* name : {"config.json", "tokenizer.json"}) {
    const std::string dir = MakeTempDir("fifo_text");
    CopyDir(kData + "/tiny_glm4_moe", dir);
    CopyDir(kData + "/tokenizers/glm", dir);
    ::unlink((dir + "/" + name).c_str());
    ASSERT_EQ(::mkfifo((dir + "/" + name).c_str(), 0600), 0);
    EXPECT_EQ(RunIsolated([&] {
                llm_runtime* rt = nullptr;
                llm_tokenizer* tok = nullptr;
                const llm_status a = llm_runtime_create(dir.c_str(), nullptr, &rt);
                const llm_status b = llm_tokenizer_create(dir.c_str(), &tok);
                llm_runtime_destroy(rt);
                llm_tokenizer_destroy(tok);
                if (std::string(name) == "config.json") return ExpectStatus(a, LLM_ERR_IO, name);
                // Without a regular tokenizer.json the directory has no tokenizer at all.
                return b == LLM_ERR_IO ? std::string() : ExpectStatus(b, LLM_ERR_NOT_FOUND, name);
              }, /*timeout_s=*/20),
              "")
        << name;
  }
}

}  // namespace
}  // namespace llmrt::hostile
