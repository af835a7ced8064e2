// The NCCL communicator on real devices (label gpu: skipped where no GPU is present): one rank
// per visible device, each on its own thread, all-reduce / all-gather against the host sum.
#include <cuda_runtime.h>

#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "src/parallel/nccl_communicator.h"

namespace llmrt {
namespace {

TEST(Nccl, EveryDeviceIsOneRankOfOneGroup) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
  auto id = NcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  const size_t n = 1000;
  std::vector<std::vector<float>> sums(devices), gathered(devices);
  std::vector<absl::Status> st(devices);
  std::vector<std::thread> threads;
  for (int r = 0; r < devices; ++r) {
    threads.emplace_back([&, r] {
      auto c = NcclCommunicator::Create(*id, r, devices, /*device=*/r, std::chrono::seconds(60));
      if (!c.ok()) {
        st[r] = c.status();
        return;
      }
      std::vector<float> host(n, static_cast<float>(r + 1));
      float *buf = nullptr, *all = nullptr;
      cudaMalloc(&buf, n * sizeof(float));
      cudaMalloc(&all, n * devices * sizeof(float));
      cudaMemcpy(buf, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
      st[r] = (*c)->AllGather(buf, all, n, DType::kF32, false);
      if (st[r].ok()) st[r] = (*c)->AllReduceSum(buf, n, DType::kF32, false);
      if (st[r].ok()) st[r] = (*c)->Barrier();
      sums[r].resize(n);
      gathered[r].resize(n * devices);
      cudaMemcpy(sums[r].data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost);
      cudaMemcpy(gathered[r].data(), all, n * devices * sizeof(float), cudaMemcpyDeviceToHost);
      cudaFree(buf);
      cudaFree(all);
    });
  }
  for (auto& t : threads) t.join();
  const float want = static_cast<float>(devices * (devices + 1) / 2);
  for (int r = 0; r < devices; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    for (float v : sums[r]) ASSERT_EQ(v, want);
    for (int q = 0; q < devices; ++q) ASSERT_EQ(gathered[r][q * n], static_cast<float>(q + 1));
  }
}

TEST(Nccl, RankOutsideTheWorldIsRefused) {
  NcclId id{};
  auto c = NcclCommunicator::Create(id, 2, 2, 0, std::chrono::seconds(1));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace llmrt
