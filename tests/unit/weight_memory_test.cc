// The CPU backend's huge-page arena (src/backend/cpu/weight_memory.h): copies are exact, 64-byte
// aligned and packed into shared chunks; a copy larger than a chunk gets its own; dropping the
// copied pages of a file mapping loses nothing (the mapping reads the same bytes afterwards).
#include "src/backend/cpu/weight_memory.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/util/safetensors.h"
#include "src/util/thread_pool.h"

namespace llmrt::cpu {
namespace {

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

TEST(HugePageArena, CopiesArePackedAlignedAndExact) {
  HugePageArena arena;
  ThreadPool pool(2);
  std::vector<std::vector<uint8_t>> sources;
  std::vector<HugePageArena::Copy> copies;
  // Small, odd-sized, multi-page (split over the pool) and larger than a 256 MiB chunk.
  for (size_t n : {size_t{1}, size_t{100}, size_t{4097}, size_t{9} << 20, size_t{300} << 20, size_t{64}}) {
    sources.push_back(Pattern(n, static_cast<uint32_t>(n)));
    absl::StatusOr<HugePageArena::Copy> c = arena.CopyIn(nullptr, sources.back().data(), n, &pool);
    ASSERT_TRUE(c.ok()) << c.status();
    copies.push_back(*c);
  }
  for (size_t i = 0; i < copies.size(); ++i) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(copies[i].data) % 64, 0u) << i;
    EXPECT_EQ(std::memcmp(copies[i].data, sources[i].data(), sources[i].size()), 0) << i;
  }
  // The small ones share a chunk; the one larger than a chunk has its own.
  EXPECT_EQ(copies[0].keepalive, copies[1].keepalive);
  EXPECT_EQ(copies[1].keepalive, copies[3].keepalive);
  EXPECT_NE(copies[4].keepalive, copies[3].keepalive);
  EXPECT_EQ(static_cast<char*>(copies[1].data) - static_cast<char*>(copies[0].data), 64);
}

TEST(HugePageArena, DroppingAFileMappingsCopiedPagesLosesNothing) {
  const std::string path = ::testing::TempDir() + "arena_source_" + std::to_string(::getpid());
  const std::vector<uint8_t> bytes = Pattern(size_t{5} << 20, 7);
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  absl::StatusOr<std::shared_ptr<MappedFile>> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const std::shared_ptr<Storage> source = *file;
  HugePageArena arena;
  // An unaligned range in the middle: its whole pages are dropped from the mapping.
  const size_t at = 12345, n = (size_t{3} << 20) + 999;
  absl::StatusOr<HugePageArena::Copy> c = arena.CopyIn(source, (*file)->data() + at, n, nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(std::memcmp(c->data, bytes.data() + at, n), 0);
  EXPECT_EQ(std::memcmp((*file)->data(), bytes.data(), bytes.size()), 0) << "the mapping reads the file again";
  std::remove(path.c_str());
}

TEST(WeightMemory, AutoResolvesToAConcreteMode) {
  const WeightMemory m = ResolveWeightMemory(WeightMemory::kAuto);
  EXPECT_EQ(m, TransparentHugePagesAvailable() ? WeightMemory::kHugePages : WeightMemory::kMapped);
  EXPECT_EQ(ResolveWeightMemory(WeightMemory::kMapped), WeightMemory::kMapped);
  EXPECT_EQ(ResolveWeightMemory(WeightMemory::kHugePages), WeightMemory::kHugePages);
}

}  // namespace
}  // namespace llmrt::cpu
