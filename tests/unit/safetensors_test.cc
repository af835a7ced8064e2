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

// The streaming header parser: what the schema allows (metadata strings, unknown scalar
// fields, zero-sized dimensions, rank 8) and what it refuses at the first byte outside it.
TEST_F(SafetensorsTest, HeaderSchemaAndLimits) {
  auto open = [&](const std::string& header, size_t data = 64) {
    WriteRaw("h.safetensors", Header(header) + std::string(data, '\0'));
    return SafetensorsFile::Open(Path("h.safetensors"));
  };
  auto ok = open(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"U8","shape":[2,0,3],"data_offsets":[0,0],)"
                 R"("note":"x","n":1},"b":{"dtype":"U8","shape":[1,1,1,1,1,1,1,2],"data_offsets":[0,2]}})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->tensors().at("a").shape, (std::vector<int64_t>{2, 0, 3}));
  EXPECT_EQ(ok->tensors().at("b").numel(), 2);
  struct Case {
    const char* what;
    std::string header;
    absl::StatusCode code;
    const char* needle;
  } cases[] = {
      {"metadata number", R"({"__metadata__":{"format":1}})", absl::StatusCode::kDataLoss, "__metadata__"},
      {"metadata list", R"({"__metadata__":["x"]})", absl::StatusCode::kDataLoss, "__metadata__"},
      {"nested unknown field", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":{}}})",
       absl::StatusCode::kDataLoss, "malformed"},
      {"dtype twice", R"({"a":{"dtype":"U8","dtype":"F32","shape":[1],"data_offsets":[0,1]}})",
       absl::StatusCode::kDataLoss, "twice"},
      {"three offsets", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", absl::StatusCode::kDataLoss,
       "malformed"},
      {"float dimension", R"({"a":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}})", absl::StatusCode::kDataLoss,
       "bad shape"},
      {"rank 9", R"({"a":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})",
       absl::StatusCode::kOutOfRange, "dimensions"},
      {"2^48 + 1 elements", R"({"a":{"dtype":"U8","shape":[281474976710657],"data_offsets":[0,1]}})",
       absl::StatusCode::kOutOfRange, "shape too large"},
      {"trailing garbage", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}x)", absl::StatusCode::kDataLoss,
       "JSON"},
      {"NUL in a name", std::string("{\"a\\u0000b\":{\"dtype\":\"Q\",\"shape\":[1],\"data_offsets\":[0,1]}}"),
       absl::StatusCode::kDataLoss, "a\\x00"},
  };
  for (const Case& c : cases) {
    auto f = open(c.header);
    EXPECT_EQ(f.status().code(), c.code) << c.what << ": " << f.status();
    EXPECT_NE(f.status().message().find(c.needle), std::string::npos) << c.what << ": " << f.status();
  }
  // Data of a type llmrt reads must be aligned to its element size (the mapping is page-aligned).
  std::string header = R"({"a":{"dtype":"BF16","shape":[1],"data_offsets":[1,3]}})";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data section starts 8-aligned
  auto misaligned = open(header);
  EXPECT_EQ(misaligned.status().code(), absl::StatusCode::kUnimplemented) << misaligned.status();
  EXPECT_TRUE(open(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[1,9]}})").ok());  // never read
}

TEST_F(SafetensorsTest, HeaderLengthLimit) {
  // Within the file but past 100 MB: refused before the header is read (a sparse file).
  std::string prefix(8, '\0');
  const uint64_t len = kMaxSafetensorsHeaderBytes + 1;
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  WriteRaw("long.safetensors", prefix);
  fs::resize_file(Path("long.safetensors"), len + 8);
  auto f = SafetensorsFile::Open(Path("long.safetensors"));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kOutOfRange) << f.status();
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

// The index is streamed: unknown parts are skipped (to a nesting limit), the weight_map must map
// names to plain file names, once each.
TEST_F(SafetensorsTest, ShardIndexSchema) {
  fs::copy_file(std::string(LLMRT_TEST_DATA) + "/tiny_kimi_k2_qlora_yarn/config.json", Path("config.json"));
  std::vector<float> a = {1, 2};
  ASSERT_TRUE(WriteSafetensors(Path("s1.safetensors"), {{"a", "F32", {2}, a.data(), 8}}).ok());
  auto open = [&](const std::string& index) {
    WriteRaw("model.safetensors.index.json", index);
    return Checkpoint::Open(dir_.string());
  };
  auto ok = open(R"({"metadata":{"x":[[{"y":null}]],"total_size":8},"weight_map":{"a":"s1.safetensors"},"z":1})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->tensors().size(), 1u);
  const std::string deep = "{\"metadata\":" + std::string(16, '[') + std::string(16, ']') + "}";
  EXPECT_EQ(open(deep).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(open(deep).status().message().find("nested"), std::string::npos);
  EXPECT_EQ(open(R"({"weight_map":{"a":"s1.safetensors","a":"s1.safetensors"}})").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(open(R"({"weight_map":{"a":["s1.safetensors"]}})").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(open(R"({"weight_map":"s1.safetensors"})").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(open(R"(["weight_map"])").status().code(), absl::StatusCode::kDataLoss);
  // A directory named as the index is not silently ignored.
  fs::remove(Path("model.safetensors.index.json"));
  fs::create_directory(Path("model.safetensors.index.json"));
  EXPECT_EQ(Checkpoint::Open(dir_.string()).status().code(), absl::StatusCode::kUnknown);  // LLM_ERR_IO
}

}  // namespace
}  // namespace llmrt
