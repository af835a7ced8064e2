// One libFuzzer binary per target: compiled with -DLLMRT_FUZZ_TARGET=<function name>.
#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return llmrt::fuzz::LLMRT_FUZZ_TARGET(data, size);
}
