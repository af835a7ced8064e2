// SHA-256 against FIPS 180-4's examples and HMAC-SHA256 against RFC 4231's test cases.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/util/sha256.h"

namespace llmrt {
namespace {

std::string Hex(const Sha256::Digest& d) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s.push_back(k[b >> 4]);
    s.push_back(k[b & 15]);
  }
  return s;
}

std::vector<uint8_t> Bytes(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

TEST(Sha256, FipsExamples) {
  EXPECT_EQ(Hex(Sha256::Hash("abc", 3)), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(Sha256::Hash("", 0)), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(Hex(Sha256::Hash(two.data(), two.size())),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a', fed in uneven pieces.
  Sha256 h;
  const std::string a(997, 'a');
  size_t left = 1000000;
  while (left > 0) {
    const size_t n = std::min(left, a.size());
    h.Update(a.data(), n);
    left -= n;
  }
  EXPECT_EQ(Hex(h.Finish()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(HmacSha256, Rfc4231) {
  struct Case {
    std::string key, data, mac;
  };
  const std::vector<Case> cases = {
      {std::string(20, '\x0b'), "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::string(20, '\xaa'), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      // A key longer than the block: hashed first.
      {std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Hex(HmacSha256(c.key.data(), c.key.size(), c.data.data(), c.data.size())), c.mac) << c.data;
  }
  const std::vector<uint8_t> a = Bytes("00ff10"), b = Bytes("00ff11");
  EXPECT_TRUE(ConstantTimeEqual(a.data(), a.data(), 3));
  EXPECT_FALSE(ConstantTimeEqual(a.data(), b.data(), 3));
}

}  // namespace
}  // namespace llmrt
