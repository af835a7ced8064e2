// The CUDA backend's collectives through a one-rank NCCL communicator on the backend's stream
// (label gpu: skipped where no GPU is present). World size 1 runs the same code path as N: the
// NCCL all-reduce and all-gather into scratch, the strided copies into the output columns, and
// the failure rule (collectives still move data after a failure; Synchronize reports it). The
// results are compared with the CPU backend's ops on the same inputs. Also: a runtime asking for
// more in-process CUDA ranks than there are devices is refused naming the device count, and AUTO
// falls back to CPU ranks.
#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/backend/registry.h"
#include "src/parallel/nccl_communicator.h"
#include "src/runtime/runtime.h"

namespace llmrt {
namespace {

int Devices() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

std::vector<float> Download(Backend& be, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  const absl::Status st = be.Download(t, out.data(), out.size() * sizeof(float));
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

Tensor Make(Backend& be, std::initializer_list<int64_t> shape, const std::vector<float>& values) {
  absl::StatusOr<Tensor> t = be.Allocate(DType::kF32, shape);
  EXPECT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(be.Upload(values.data(), values.size() * sizeof(float), *t).ok());
  return *t;
}

std::vector<float> Ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(static_cast<int>(i % 97) - 48);
  return v;
}

struct Pair {
  std::unique_ptr<Backend> cpu, cuda;
  std::unique_ptr<NcclCommunicator> comm;
};

// A CUDA backend joined to a one-rank NCCL group on its own stream, and a CPU backend.
Pair MakePair() {
  Pair p;
  auto cpu = CreateBackend(BackendKind::kCpu, BackendOptions{});
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  p.cpu = std::move(*cpu);
  auto cuda = CreateBackend(BackendKind::kCuda, BackendOptions{});
  EXPECT_TRUE(cuda.ok()) << cuda.status();
  if (!cuda.ok()) return p;
  p.cuda = std::move(*cuda);
  auto id = NcclUniqueId();
  EXPECT_TRUE(id.ok()) << id.status();
  if (!id.ok()) return p;
  auto comm = NcclCommunicator::Create(*id, 0, 1, /*device=*/0, std::chrono::seconds(60));
  EXPECT_TRUE(comm.ok()) << comm.status();
  if (!comm.ok()) return p;
  p.comm = std::move(*comm);
  p.comm->set_stream(p.cuda->device_stream());
  p.cuda->set_communicator(p.comm.get());
  return p;
}

TEST(CudaCollectives, EveryOpMatchesTheCpuBackendOverNccl) {
  if (Devices() == 0) GTEST_SKIP() << "no CUDA device";
  Pair p = MakePair();
  ASSERT_NE(p.comm, nullptr);
  Backend& cpu = *p.cpu;
  Backend& gpu = *p.cuda;

  // AllReduceSum over one rank: the values come back unchanged, in place.
  const std::vector<float> x = Ramp(5 * 300, 0.25f);
  Tensor xg = Make(gpu, {5, 300}, x);
  gpu.AllReduceSum(xg);
  ASSERT_TRUE(gpu.Synchronize().ok());
  EXPECT_EQ(Download(gpu, xg), x);

  // AllGatherColumns into a row view of a wider buffer (the logits' layout): scratch gets the
  // gathered blocks, out each row's columns; the columns outside the view stay as they were.
  const int64_t S = 3, n = 70, stride = 90;
  const std::vector<float> local = Ramp(static_cast<size_t>(S * n), 1.5f);
  std::vector<float> wide(static_cast<size_t>(4 * stride), -7.0f);
  Tensor lg = Make(gpu, {S, n}, local), lc = Make(cpu, {S, n}, local);
  Tensor sg = Make(gpu, {S * n}, std::vector<float>(static_cast<size_t>(S * n), 0.0f));
  Tensor sc = Make(cpu, {S * n}, std::vector<float>(static_cast<size_t>(S * n), 0.0f));
  Tensor wg = Make(gpu, {4, stride}, wide), wc = Make(cpu, {4, stride}, wide);
  gpu.AllGatherColumns(lg, sg, wg.Rows(0, S).Cols(0, n));
  cpu.AllGatherColumns(lc, sc, wc.Rows(0, S).Cols(0, n));
  ASSERT_TRUE(gpu.Synchronize().ok());
  ASSERT_TRUE(cpu.Synchronize().ok());
  EXPECT_EQ(Download(gpu, wg), Download(cpu, wc));
  EXPECT_EQ(Download(gpu, sg), local);

  // EmbeddingShard then the all-reduce, as a sharded model's first op: rows of this rank's
  // vocabulary shard [first, first + rows), zeros for every other id.
  const int64_t rows = 6, H = 40, first = 10;
  const std::vector<float> table = Ramp(static_cast<size_t>(rows * H), 0.5f);
  auto stored = [&](Backend& be) {
    Weight w;
    w.format = kWeightF32;
    w.rows = rows;
    w.cols = H;
    w.data = Make(be, {rows, H}, table);
    return w;
  };
  const Weight tg = stored(gpu), tc = stored(cpu);
  const std::vector<int32_t> ids = {10, 3, 15, 16, 12, 0, 11};
  auto id_tensor = [&](Backend& be) {
    absl::StatusOr<Tensor> t = be.Allocate(DType::kI32, {static_cast<int64_t>(ids.size())});
    EXPECT_TRUE(t.ok());
    EXPECT_TRUE(be.Upload(ids.data(), ids.size() * sizeof(int32_t), *t).ok());
    return *t;
  };
  const int64_t T = static_cast<int64_t>(ids.size());
  Tensor eg = Make(gpu, {T, H}, std::vector<float>(static_cast<size_t>(T * H), 9.0f));
  Tensor ec = Make(cpu, {T, H}, std::vector<float>(static_cast<size_t>(T * H), 9.0f));
  gpu.EmbeddingShard(tg, first, id_tensor(gpu), eg);
  gpu.AllReduceSum(eg);
  cpu.EmbeddingShard(tc, first, id_tensor(cpu), ec);
  ASSERT_TRUE(gpu.Synchronize().ok());
  ASSERT_TRUE(cpu.Synchronize().ok());
  const std::vector<float> got = Download(gpu, eg);
  EXPECT_EQ(got, Download(cpu, ec));
  EXPECT_EQ(got[static_cast<size_t>(1 * H)], 0.0f);                      // id 3: another rank's row
  EXPECT_EQ(got[0], table[0]);                                            // id 10: row 0
  EXPECT_EQ(got[static_cast<size_t>(2 * H + 1)], table[static_cast<size_t>(5 * H + 1)]);  // id 15: row 5

  // A failure recorded before a collective: the collective still runs (NCCL peers would wait
  // for it), Synchronize returns the failure once, and the next collective works.
  const uint64_t before = gpu.collective_ns();
  gpu.RecordFailure(absl::InternalError("fault injected before the all-reduce"));
  gpu.AllReduceSum(xg);
  gpu.AllGatherColumns(lg, sg, wg.Rows(0, S).Cols(0, n));
  const absl::Status failed = gpu.Synchronize();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_NE(std::string(failed.message()).find("fault injected"), std::string::npos) << failed;
  EXPECT_GT(gpu.collective_ns(), before) << "the collectives were skipped after the failure";
  gpu.AllReduceSum(xg);
  ASSERT_TRUE(gpu.Synchronize().ok());
  EXPECT_EQ(Download(gpu, xg), x);
}

TEST(CudaCollectives, MoreInProcessRanksThanDevicesIsRefusedNamingTheCount) {
  const int devices = Devices();
  if (devices == 0) GTEST_SKIP() << "no CUDA device";
  const std::string dir = std::string(LLMRT_TEST_DATA) + "/tiny_kimi_k2_qlora_yarn";
  RuntimeOptions o;
  o.backend = BackendKind::kCuda;
  o.tensor_parallel = devices + 1;
  o.policy.kv_codec = kKvCodecF32;
  auto rt = Runtime::Create(dir, o);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), absl::StatusCode::kUnimplemented) << rt.status();
  const std::string want = absl::StrCat("tensor_parallel ", devices + 1,
                                        " runs one rank per cuda device, and this host has ", devices,
                                        devices == 1 ? " device" : " devices");
  EXPECT_NE(std::string(rt.status().message()).find(want), std::string::npos) << rt.status();
  // AUTO falls back to CPU ranks (with a warning) and runs.
  o.backend = BackendKind::kAuto;
  auto autort = Runtime::Create(dir, o);
  ASSERT_TRUE(autort.ok()) << autort.status();
  EXPECT_EQ((*autort)->Info().backend, BackendKind::kCpu);
}

}  // namespace
}  // namespace llmrt
