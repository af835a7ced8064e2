#include "src/parallel/comm_id.h"

#include <dlfcn.h>

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "src/util/errors.h"

namespace llmrt {
namespace {

constexpr char kMpiMagic[8] = {'l', 'l', 'm', 'r', 't', 'M', 'P', 'I'};
constexpr uint8_t kMpiVersion = 1;
constexpr size_t kMpiRandomBytes = 16;

}  // namespace

absl::StatusOr<CommId> MakeMpiCommId() {
  CommId id;
  id.kind = CommIdKind::kMpi;
  std::memcpy(id.bytes.data(), kMpiMagic, sizeof(kMpiMagic));
  id.bytes[sizeof(kMpiMagic)] = kMpiVersion;
  try {
    std::random_device rd;
    for (size_t i = 0; i < kMpiRandomBytes; i += 4) {
      const uint32_t v = rd();
      std::memcpy(id.bytes.data() + sizeof(kMpiMagic) + 1 + i, &v, 4);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("no source of random bytes for a communicator id: ", e.what()));
  }
  return id;
}

absl::Status CheckMpiCommId(const CommIdBytes& id) {
  if (std::memcmp(id.data(), kMpiMagic, sizeof(kMpiMagic)) != 0 || id[sizeof(kMpiMagic)] != kMpiVersion) {
    return absl::InvalidArgumentError(
        "comm_id is not a CPU (MPI) group id made by llm_comm_id_create(LLM_BACKEND_CPU) of this llmrt version");
  }
  for (size_t i = sizeof(kMpiMagic) + 1 + kMpiRandomBytes; i < id.size(); ++i) {
    if (id[i] != 0) return absl::InvalidArgumentError("comm_id has bytes set past its CPU (MPI) group tag");
  }
  return absl::OkStatus();
}

absl::StatusOr<CommId> MakeNcclCommId() {
  // NCCL is looked up at run time: a host without it can still load libllmrt and run CPU ranks.
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return UnsupportedError(absl::StrCat("a CUDA communicator id needs NCCL, which could not be loaded (",
                                         why != nullptr ? why : "libnccl.so.2 not found", ")"));
  }
  // ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId); ncclUniqueId is 128 opaque bytes.
  using GetUniqueId = int (*)(void*);
  using GetErrorString = const char* (*)(int);
  auto get = reinterpret_cast<GetUniqueId>(dlsym(lib, "ncclGetUniqueId"));
  auto err = reinterpret_cast<GetErrorString>(dlsym(lib, "ncclGetErrorString"));
  if (get == nullptr) {
    dlclose(lib);
    return UnsupportedError("the NCCL library loaded has no ncclGetUniqueId");
  }
  CommId id;
  id.kind = CommIdKind::kNccl;
  const int rc = get(id.bytes.data());
  std::string what = rc != 0 && err != nullptr ? err(rc) : "";
  // The library stays loaded: NCCL keeps bootstrap state alive for the id it handed out.
  if (rc != 0) return UnsupportedError(absl::StrCat("ncclGetUniqueId failed (", rc, "): ", what));
  return id;
}

}  // namespace llmrt
