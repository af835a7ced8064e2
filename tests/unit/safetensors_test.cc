#include "src/util/safetensors.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/model/checkpoint.h"

namespace llmrt {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("llmrt_st_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& n) const { return (dir_ / n).string(); }
  void WriteRaw(const std::string& name, const std::string& bytes) {
    std::ofstream(Path(name), std::ios::binary) << bytes;
  }
  static std::string Header(const std::string& json) {
    std::string s(8, '\0');
    uint64_t n = json.size();
    for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return s + json;
  }
  fs::path dir_;
};

TEST_F(SafetensorsTest, WriteThenReadRoundTrips) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {0x3f80, 0x4000};
  ASSERT_TRUE(WriteSafetensors(Path("x.safetensors"),
                               {{"a", "F32", {2, 3}, a.data(), a.size() * 4}, {"b", "BF16", {2}, b.data(), 4}})
                  .ok());
  auto f = SafetensorsFile::Open(Path("x.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->tensors().size(), 2u);
  const TensorInfo& ta = f->tensors().at("a");
  EXPECT_EQ(ta.dtype, DType::kF32);
  EXPECT_EQ(ta.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(0, std::memcmp(ta.data, a.data(), 24));
  EXPECT_EQ(f->tensors().at("b").dtype, DType::kBF16);
}

TEST_F(SafetensorsTest, RejectsCorruptFiles) {
  struct Case {
    const char* what;
    std::string bytes;
    const char* needle;
  } cases[] = {
      {"empty", "", "truncated"},
      {"short", std::string(5, '\0'), "truncated"},
      {"huge header length", std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + "{}", "header length"},
      {"not json", Header("{not json"), "JSON"},
      {"not an object", Header("[1,2]"), "JSON"},
      {"missing offsets", Header(R"({"a":{"dtype":"F32","shape":[1]}})") + "1234", "malformed"},
      {"unknown dtype", Header(R"({"a":{"dtype":"Q9","shape":[1],"data_offsets":[0,4]}})") + "1234", "unknown dtype"},
      {"negative shape", Header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})") + "1234", "bad shape"},
      {"offsets past end", Header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})") + "1234", "outside"},
      {"size mismatch", Header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})") + "1234", "bytes for"},
      {"reversed offsets", Header(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})") + "1234", "outside"},
  };
  for (const auto& c : cases) {
    WriteRaw("bad.safetensors", c.bytes);
    auto f = SafetensorsFile::Open(Path("bad.safetensors"));
    ASSERT_FALSE(f.ok()) << c.what;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss) << c.what << ": " << f.status();
    EXPECT_NE(f.status().message().find(c.needle), std::string::npos) << c.what << ": " << f.status();
  }
}

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  auto f = SafetensorsFile::Open(Path("nope.safetensors"));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, ShardedCheckpointFollowsTheIndex) {
  fs::copy_file(std::string(LLMRT_TEST_DATA) + "/tiny_kimi_k2_qlora_yarn/config.json", Path("config.json"));
  std::vector<float> a = {1, 2}, b = {3, 4, 5};
  ASSERT_TRUE(WriteSafetensors(Path("model-00001-of-00002.safetensors"), {{"a", "F32", {2}, a.data(), 8}}).ok());
  ASSERT_TRUE(WriteSafetensors(Path("model-00002-of-00002.safetensors"), {{"b", "F32", {3}, b.data(), 12}}).ok());
  WriteRaw("model.safetensors.index.json",
           R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})");
  auto ck = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_NE(ck->Find("a"), nullptr);
  ASSERT_NE(ck->Find("b"), nullptr);
  EXPECT_EQ(ck->Find("b")->shape, (std::vector<int64_t>{3}));
  // An index that names a tensor its shard lacks is a format error.
  WriteRaw("model.safetensors.index.json",
           R"({"weight_map":{"a":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})");
  auto bad = Checkpoint::Open(dir_.string());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
  // A shard path that leaves the directory is refused.
  WriteRaw("model.safetensors.index.json", R"({"weight_map":{"a":"../x.safetensors"}})");
  EXPECT_EQ(Checkpoint::Open(dir_.string()).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace llmrt
