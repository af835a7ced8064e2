// AUTO's choice among registered backends, with a fake device backend registered in front of the
// CPU (its own executable: the registry cannot forget an entry, and the other suites must not
// meet the fake). On a host where a real device backend runs, AUTO picks that one first and
// these cases do not apply.
#include <memory>

#include "gtest/gtest.h"
#include "src/backend/registry.h"
#include "src/util/errors.h"

namespace llmrt {
namespace {

// A device backend that is present but refuses the int8 activation policy (as the CUDA backend
// does) and fails device 1 with an out-of-memory error.
absl::StatusOr<std::unique_ptr<Backend>> FakeCreate(const BackendOptions& o) {
  if (o.activations == QuantizedActivations::kInt8) return UnsupportedError("fake device: no int8 activations");
  if (o.device == 1) return absl::ResourceExhaustedError("fake device: out of memory");
  return UnsupportedError("fake device: nothing else either");
}

class RegistryAuto : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    real_devices_ = BackendDeviceCount(BackendKind::kCuda);
    if (real_devices_ > 0) return;
    BackendEntry e;
    e.kind = BackendKind::kCuda;
    e.available = [] { return true; };
    e.create = FakeCreate;
    e.device_count = [] { return 2; };
    RegisterBackend(e);
  }
  void SetUp() override {
    if (real_devices_ > 0) GTEST_SKIP() << "a real device backend runs here: AUTO picks it before any fake";
  }
  static int real_devices_;
};
int RegistryAuto::real_devices_ = 0;

TEST_F(RegistryAuto, ADeviceThatRefusesTheOptionsGivesWayToTheCpu) {
  BackendOptions o;
  o.num_threads = 1;
  o.activations = QuantizedActivations::kInt8;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend(BackendKind::kAuto, o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->kind(), BackendKind::kCpu);
  // Asked for by name, the device's refusal is the answer.
  absl::StatusOr<std::unique_ptr<Backend>> d = CreateBackend(BackendKind::kCuda, o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(d.status().message().find("no int8 activations"), std::string::npos) << d.status();
}

TEST_F(RegistryAuto, ARealDeviceFailureIsReportedNotHidden) {
  BackendOptions o;
  o.num_threads = 1;
  o.device = 1;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend(BackendKind::kAuto, o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted) << b.status();
}

}  // namespace
}  // namespace llmrt
