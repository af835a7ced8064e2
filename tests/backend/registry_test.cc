// The backend registry: LLM_BACKEND_* resolve through it. The CUDA backend exists in builds with
// the toolkit (LLMRT_WITH_CUDA) and runs only where the CUDA runtime finds a device; elsewhere
// asking for it is UNSUPPORTED with a message saying why, and AUTO falls back to the CPU.
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "src/backend/registry.h"

namespace llmrt {
namespace {

TEST(BackendRegistry, CudaRunsOnlyWhereItCanAndAutoFallsBackToTheCpu) {
  absl::StatusOr<std::unique_ptr<Backend>> cuda = CreateBackend(BackendKind::kCuda, BackendOptions{});
  if (cuda.ok()) {
    EXPECT_EQ((*cuda)->kind(), BackendKind::kCuda);
    EXPECT_EQ((*cuda)->name(), "cuda");
  } else {
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kUnimplemented) << cuda.status();
    const std::string msg(cuda.status().message());
#ifdef LLMRT_WITH_CUDA
    EXPECT_NE(msg.find("the cuda backend cannot run here"), std::string::npos) << msg;
#else
    EXPECT_NE(msg.find("the cuda backend is not part of this build"), std::string::npos) << msg;
#endif
  }
  absl::StatusOr<std::unique_ptr<Backend>> any = CreateBackend(BackendKind::kAuto, BackendOptions{});
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ((*any)->kind(), cuda.ok() ? BackendKind::kCuda : BackendKind::kCpu);
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend(BackendKind::kCpu, BackendOptions{});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->kind(), BackendKind::kCpu);
}

}  // namespace
}  // namespace llmrt
