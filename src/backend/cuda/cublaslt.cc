#include "src/backend/cuda/cublaslt.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/util/errors.h"
#include "src/util/log.h"
#include "src/util/status.h"

namespace llmrt {
namespace {

// Exactly the cuBLASLt functions used, typed from the header (cublasLt.h supplies only types).
struct CublasLtApi {
  decltype(&cublasLtCreate) Create = nullptr;
  decltype(&cublasLtDestroy) Destroy = nullptr;
  decltype(&cublasLtGetStatusName) GetStatusName = nullptr;
  decltype(&cublasLtGetVersion) GetVersion = nullptr;
  decltype(&cublasLtMatmulDescCreate) MatmulDescCreate = nullptr;
  decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic = nullptr;
  decltype(&cublasLtMatmulAlgoCheck) MatmulAlgoCheck = nullptr;
  decltype(&cublasLtMatmulAlgoConfigGetAttribute) MatmulAlgoConfigGetAttribute = nullptr;
  decltype(&cublasLtMatmul) Matmul = nullptr;
};

#ifndef LLMRT_CUDA_LIBRARY_DIR
#define LLMRT_CUDA_LIBRARY_DIR ""
#endif

// Loads `path` and resolves every entry point; the handle is kept open (never unloaded) on
// success and closed on failure.
absl::StatusOr<CublasLtApi> Load(const std::string& path, std::vector<std::string> fallbacks) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string why;
  if (lib == nullptr) {
    const char* e = dlerror();
    why = e != nullptr ? e : "not found";
  }
  for (const std::string& f : fallbacks) {
    if (lib != nullptr) break;
    lib = dlopen(f.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (lib == nullptr) {
    return UnsupportedError(absl::StrCat("the BF16 and FP8 activation policies on CUDA need cuBLASLt, and ", path,
                                         " could not be loaded (", why, ")"));
  }
  CublasLtApi a;
  const char* missing = nullptr;
  auto bind = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (fn == nullptr && missing == nullptr) missing = name;
  };
  bind(a.Create, "cublasLtCreate");
  bind(a.Destroy, "cublasLtDestroy");
  bind(a.GetStatusName, "cublasLtGetStatusName");
  bind(a.GetVersion, "cublasLtGetVersion");
  bind(a.MatmulDescCreate, "cublasLtMatmulDescCreate");
  bind(a.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  bind(a.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  bind(a.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  bind(a.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  bind(a.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  bind(a.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  bind(a.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  bind(a.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  bind(a.MatmulAlgoCheck, "cublasLtMatmulAlgoCheck");
  bind(a.MatmulAlgoConfigGetAttribute, "cublasLtMatmulAlgoConfigGetAttribute");
  bind(a.Matmul, "cublasLtMatmul");
  if (missing != nullptr) {
    dlclose(lib);
    return UnsupportedError(absl::StrCat("the cuBLASLt library ", path, " has no ", missing, " (cuBLASLt ",
                                         CUBLAS_VER_MAJOR, ".x is needed)"));
  }
  return a;
}

// The process's library, loaded on first use.
absl::StatusOr<const CublasLtApi*> Api() {
  static absl::StatusOr<const CublasLtApi*>* api = [] {
    std::vector<std::string> fallbacks;
    const std::string dir = LLMRT_CUDA_LIBRARY_DIR;
    if (!dir.empty()) fallbacks.push_back(absl::StrCat(dir, "/", CublasLtLibraryName()));
    absl::StatusOr<CublasLtApi> a = Load(CublasLtLibraryName(), std::move(fallbacks));
    if (!a.ok()) return new absl::StatusOr<const CublasLtApi*>(a.status());
    return new absl::StatusOr<const CublasLtApi*>(new CublasLtApi(*a));
  }();
  return *api;
}

}  // namespace

std::string CublasLtLibraryName() { return absl::StrCat("libcublasLt.so.", CUBLAS_VER_MAJOR); }

absl::Status CheckCublasLtLibrary(const std::string& path) { return Load(path, {}).status(); }

namespace {

const char* OperandsName(CublasLtGemm::Operands ops) {
  switch (ops) {
    case CublasLtGemm::Operands::kFp8Block128: return "FP8 block-scaled";
    case CublasLtGemm::Operands::kBf16Out: return "BF16 (bfloat16 output)";
    default: return "BF16";
  }
}

// D's element type, and the elements of a 16-byte row alignment.
cudaDataType_t OutputType(CublasLtGemm::Operands ops) {
  return ops == CublasLtGemm::Operands::kBf16Out ? CUDA_R_16BF : CUDA_R_32F;
}
int64_t OutputAlign(CublasLtGemm::Operands ops) { return ops == CublasLtGemm::Operands::kBf16Out ? 8 : 4; }

cudaDataType_t OperandType(CublasLtGemm::Operands ops) {
  return ops == CublasLtGemm::Operands::kFp8Block128 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
}

}  // namespace

struct CublasLtGemm::Call {
  cublasLtMatmulDesc_t desc = nullptr;  // the shape's
  cublasLtMatrixLayout_t a = nullptr;   // the shape's
  const cublasLtMatmulAlgo_t* algo = nullptr;
  cublasLtMatrixLayout_t b = nullptr, d = nullptr;
  Operands ops = Operands::kBf16;
  int64_t n = 0, k = 0, t = 0;
};

struct CublasLtGemm::Impl {
  const CublasLtApi* api = nullptr;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::mutex mu;
  // Per (N, K): the descriptor, A's layout, and the algorithm (taken == false: none without
  // split-K; every T of the shape runs the caller's kernel).
  struct Shape {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool taken = false;
  };
  std::map<std::tuple<Operands, int64_t, int64_t>, Shape> shapes;
  // Per (operands, N, K, T, ldo): B's and D's layouts; null b: the algorithm refuses this T.
  std::map<std::tuple<Operands, int64_t, int64_t, int64_t, int64_t>, Call> calls;
  // The previous generation of `calls` (Prepare), destroyed at the next retirement.
  std::map<std::tuple<Operands, int64_t, int64_t, int64_t, int64_t>, Call> retired;

  std::string Name(cublasStatus_t s) const {
    const char* n = api->GetStatusName != nullptr ? api->GetStatusName(s) : nullptr;
    return n != nullptr ? std::string(n) : absl::StrCat("cublasStatus ", static_cast<int>(s));
  }
  absl::Status Check(cublasStatus_t s, const char* what) const {
    if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
    if (s == CUBLAS_STATUS_ALLOC_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat(what, ": ", Name(s)));
    }
    return absl::InternalError(absl::StrCat(what, ": ", Name(s)));
  }
  void DestroyCall(Call& c) {
    if (c.b != nullptr) api->MatrixLayoutDestroy(c.b);
    if (c.d != nullptr) api->MatrixLayoutDestroy(c.d);
    c.b = c.d = nullptr;
  }
  absl::Status MakeShape(Operands ops, int64_t N, int64_t K, Shape* s);
  // B and D layouts for T rows (ldo: D's column stride).
  absl::Status MakeLayouts(Operands ops, int64_t K, int64_t N, int64_t T, int64_t ldo, cublasLtMatrixLayout_t* b,
                           cublasLtMatrixLayout_t* d) {
    LLMRT_RETURN_IF_ERROR(Check(api->MatrixLayoutCreate(b, OperandType(ops), static_cast<uint64_t>(K),
                                                        static_cast<uint64_t>(T), K),
                                "cublasLtMatrixLayoutCreate (activations)"));
    const absl::Status s = Check(api->MatrixLayoutCreate(d, OutputType(ops), static_cast<uint64_t>(N),
                                                         static_cast<uint64_t>(T), ldo),
                                 "cublasLtMatrixLayoutCreate (output)");
    if (!s.ok()) {
      api->MatrixLayoutDestroy(*b);
      *b = nullptr;
    }
    return s;
  }
  // Whether `algo` runs (N, K) at T rows with D's stride ldo.
  absl::StatusOr<bool> Runs(Operands ops, const Shape& s, const cublasLtMatmulAlgo_t& algo, int64_t N, int64_t K,
                            int64_t T, int64_t ldo) {
    cublasLtMatrixLayout_t b = nullptr, d = nullptr;
    LLMRT_RETURN_IF_ERROR(MakeLayouts(ops, K, N, T, ldo, &b, &d));
    cublasLtMatmulHeuristicResult_t r{};
    const cublasStatus_t st = api->MatmulAlgoCheck(handle, s.desc, s.a, b, d, d, &algo, &r);
    api->MatrixLayoutDestroy(b);
    api->MatrixLayoutDestroy(d);
    return st == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= kWorkspaceBytes;
  }
};

absl::Status CublasLtGemm::Impl::MakeShape(Operands ops, int64_t N, int64_t K, Shape* s) {
  if (ops == Operands::kFp8Block128 && (K + 127) / 128 % 4 != 0) {
    // cuBLASLt reads a weight's 128 x 128 block scales with each row of blocks at a stride of
    // ceil(K / 128) rounded up to 4, and the layout has no stride attribute: the checkpoint's
    // [ceil(N / 128), ceil(K / 128)] array matches it only when ceil(K / 128) is a multiple of 4
    // (every linear of the released Kimi K2 and GLM shapes is).
    Log(LogLevel::kInfo, absl::StrCat("cuBLASLt: the FP8 block-scaled weight [", N, ", ", K, "] has ", (K + 127) / 128,
                                      " scale blocks per row (not a multiple of 4); it runs the backend's own kernel"));
    return absl::OkStatus();
  }
  LLMRT_RETURN_IF_ERROR(
      Check(api->MatmulDescCreate(&s->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate"));
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  LLMRT_RETURN_IF_ERROR(Check(api->MatmulDescSetAttribute(s->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)),
                              "cublasLtMatmulDescSetAttribute (TRANSA)"));
  LLMRT_RETURN_IF_ERROR(Check(api->MatmulDescSetAttribute(s->desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)),
                              "cublasLtMatmulDescSetAttribute (TRANSB)"));
  if (ops == Operands::kFp8Block128) {
    // A (the weight): a float32 scale per 128 x 128 block; B (the activations): one per 128
    // values of a column (a token row). The pointers are set per call (RunFp8).
    // A library that does not know these modes (one older than the headers, found first on the
    // library path) refuses them: a refusal like the heuristic's, so the shape runs the
    // backend's own kernel rather than failing every call.
    const int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    cublasStatus_t mode = api->MatmulDescSetAttribute(s->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode));
    if (mode == CUBLAS_STATUS_SUCCESS) {
      mode = api->MatmulDescSetAttribute(s->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode));
    }
    if (mode == CUBLAS_STATUS_ALLOC_FAILED || mode == CUBLAS_STATUS_NOT_INITIALIZED) {
      return Check(mode, "cublasLtMatmulDescSetAttribute (scale modes)");
    }
    if (mode != CUBLAS_STATUS_SUCCESS) {
      Log(LogLevel::kInfo, absl::StrCat("cuBLASLt: this library takes no 128 x 128 block scales (", Name(mode),
                                        "); the FP8 block-scaled weight [", N, ", ", K, "] runs the backend's own kernel"));
      return absl::OkStatus();
    }
    // The heuristic may look at the scale pointers: until the first call sets them, both name
    // the workspace (device memory, 256-byte aligned).
    const void* valid_device_ptr = workspace;
    for (cublasLtMatmulDescAttributes_t attr : {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER}) {
      LLMRT_RETURN_IF_ERROR(Check(api->MatmulDescSetAttribute(s->desc, attr, &valid_device_ptr, sizeof(valid_device_ptr)),
                                  "cublasLtMatmulDescSetAttribute (scale pointer)"));
    }
  }
  // The weight [N, K] row-major is the column-major K x N matrix with ld K.
  LLMRT_RETURN_IF_ERROR(Check(api->MatrixLayoutCreate(&s->a, OperandType(ops), static_cast<uint64_t>(K),
                                                      static_cast<uint64_t>(N), K),
                              "cublasLtMatrixLayoutCreate (weight)"));

  cublasLtMatmulPreference_t pref = nullptr;
  LLMRT_RETURN_IF_ERROR(Check(api->MatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"));
  const uint64_t ws = kWorkspaceBytes;
  const uint32_t align = 16;
  absl::Status st = Check(api->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                          "cublasLtMatmulPreferenceSetAttribute (workspace)");
  for (cublasLtMatmulPreferenceAttributes_t attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (st.ok()) {
      st = Check(api->MatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)),
                 "cublasLtMatmulPreferenceSetAttribute (alignment)");
    }
  }
  // The heuristic at the canonical T, with D's stride the contiguous N rounded up to the 4
  // floats (8 bfloat16 values) that keep rows 16-byte aligned (the stride does not enter the
  // algorithm's choice beyond alignment).
  constexpr int kCandidates = 16;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int count = 0;
  cublasLtMatrixLayout_t b = nullptr, d = nullptr;
  const int64_t ldo = (N + OutputAlign(ops) - 1) / OutputAlign(ops) * OutputAlign(ops);
  if (st.ok()) st = MakeLayouts(ops, K, N, kCanonicalRows, ldo, &b, &d);
  if (st.ok()) {
    const cublasStatus_t h =
        api->MatmulAlgoGetHeuristic(handle, s->desc, s->a, b, d, d, pref, kCandidates, results, &count);
    // Running out of memory or an uninitialized library is an error; any other refusal
    // (NOT_SUPPORTED, INVALID_VALUE for a configuration this library or device does not take,
    // ARCH_MISMATCH...) means no algorithm: the shape runs the caller's kernel.
    if (h == CUBLAS_STATUS_ALLOC_FAILED || h == CUBLAS_STATUS_NOT_INITIALIZED) {
      st = Check(h, "cublasLtMatmulAlgoGetHeuristic");
    } else if (h != CUBLAS_STATUS_SUCCESS) {
      Log(LogLevel::kInfo, absl::StrCat("cuBLASLt: the heuristic has no algorithm for a ", OperandsName(ops),
                                        " weight [", N, ", ", K, "] (", Name(h), ")"));
      count = 0;
    }
  }
  if (b != nullptr) api->MatrixLayoutDestroy(b);
  if (d != nullptr) api->MatrixLayoutDestroy(d);
  api->MatmulPreferenceDestroy(pref);
  LLMRT_RETURN_IF_ERROR(st);

  // The first algorithm (the heuristic's order: fastest first) without split-K, one needing no
  // workspace first, that also runs at the smallest T a call passes (1; 4 for FP8, whose callers
  // pad T to a multiple of 4). An algorithm that needs workspace without split-K may be a
  // stream-K kernel, whose division of the K loop between blocks follows the grid (so T): BF16
  // weights never take one (their fallback is the tiled kernel); FP8 block-scaled ones may, as
  // a second choice, logged (the GPU check's batch-invariance tests cover them).
  const int64_t t_min = ops == Operands::kFp8Block128 ? 4 : 1;
  const int passes = ops == Operands::kFp8Block128 ? 2 : 1;
  for (int pass = 0; pass < passes && !s->taken; ++pass) {
    for (int i = 0; i < count && !s->taken; ++i) {
      const cublasLtMatmulHeuristicResult_t& r = results[i];
      if (r.state != CUBLAS_STATUS_SUCCESS) continue;
      if (pass == 0 && r.workspaceSize != 0) continue;
      int32_t splits = 1;
      uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
      size_t written = 0;
      if (api->MatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits),
                                            &written) != CUBLAS_STATUS_SUCCESS ||
          api->MatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme),
                                            &written) != CUBLAS_STATUS_SUCCESS) {
        continue;
      }
      if (splits > 1 || scheme != CUBLASLT_REDUCTION_SCHEME_NONE) continue;
      LLMRT_ASSIGN_OR_RETURN(const bool runs_one, Runs(ops, *s, r.algo, N, K, t_min, ldo));
      if (!runs_one) continue;
      s->algo = r.algo;
      s->taken = true;
      if (pass == 1) {
        Log(LogLevel::kInfo, absl::StrCat("cuBLASLt: the ", OperandsName(ops), " weight [", N, ", ", K,
                                          "] takes an algorithm that needs ", r.workspaceSize,
                                          " bytes of workspace (none without)"));
      }
    }
  }
  if (!s->taken) {
    Log(LogLevel::kInfo, absl::StrCat("cuBLASLt: no algorithm without split-K for a ", OperandsName(ops), " weight [", N,
                                      ", ", K, "] (", count, " candidates); it runs the backend's own kernel"));
  }
  return absl::OkStatus();
}

CublasLtGemm::CublasLtGemm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(void* workspace) {
  LLMRT_ASSIGN_OR_RETURN(const CublasLtApi* api, Api());
  auto impl = std::make_unique<Impl>();
  impl->api = api;
  impl->workspace = workspace;
  LLMRT_RETURN_IF_ERROR(impl->Check(api->Create(&impl->handle), "cublasLtCreate"));
  Log(LogLevel::kInfo, absl::StrCat("cuda backend: the activation policy's GEMMs through ", CublasLtLibraryName(),
                                    " (version ", api->GetVersion(), ")"));
  return std::unique_ptr<CublasLtGemm>(new CublasLtGemm(std::move(impl)));
}

CublasLtGemm::~CublasLtGemm() {
  Impl& m = *impl_;
  for (auto& [key, c] : m.calls) m.DestroyCall(c);
  for (auto& [key, c] : m.retired) m.DestroyCall(c);
  for (auto& [key, s] : m.shapes) {
    if (s.a != nullptr) m.api->MatrixLayoutDestroy(s.a);
    if (s.desc != nullptr) m.api->MatmulDescDestroy(s.desc);
  }
  if (m.handle != nullptr) m.api->Destroy(m.handle);
}

absl::StatusOr<const CublasLtGemm::Call*> CublasLtGemm::Prepare(int64_t N, int64_t K, int64_t T, int64_t ldo) {
  return Prepare(Operands::kBf16, N, K, T, ldo);
}

absl::StatusOr<const CublasLtGemm::Call*> CublasLtGemm::Prepare(Operands ops, int64_t N, int64_t K, int64_t T,
                                                                int64_t ldo) {
  // Rows of A and B (K elements) and of D (ldo elements) 16-byte aligned.
  const int64_t k_align = ops == Operands::kFp8Block128 ? 16 : 8;
  if (K % k_align != 0 || ldo % OutputAlign(ops) != 0) return static_cast<const Call*>(nullptr);
  // The activations' VEC128 scales are read at a stride of T rounded up to 4 (callers pad T).
  if (ops == Operands::kFp8Block128 && T % 4 != 0) return static_cast<const Call*>(nullptr);
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  auto [it, added] = m.shapes.try_emplace({ops, N, K});
  Impl::Shape& s = it->second;
  if (added) {
    const absl::Status st = m.MakeShape(ops, N, K, &s);
    if (!st.ok()) {
      if (s.a != nullptr) m.api->MatrixLayoutDestroy(s.a);
      if (s.desc != nullptr) m.api->MatmulDescDestroy(s.desc);
      m.shapes.erase(it);
      return absl::Status(st.code(), absl::StrCat("cuBLASLt plan for a ", OperandsName(ops), " weight [", N, ", ", K,
                                                  "]: ", st.message()));
    }
  }
  if (!s.taken) return static_cast<const Call*>(nullptr);
  // The layouts of a few hundred T per shape (a step's rows are at most max_tokens_per_step);
  // past kMaxCalls the map is retired whole, bounding the host memory it holds. A retired map's
  // layouts live until the next retirement, so a Call returned before it stays valid for
  // kMaxCalls further plans (a caller runs its Call right after Prepare).
  constexpr size_t kMaxCalls = 4096;
  const auto key = std::make_tuple(ops, N, K, T, ldo);
  auto found = m.calls.find(key);
  if (found == m.calls.end()) {
    if (m.calls.size() >= kMaxCalls) {
      for (auto& [k, c] : m.retired) m.DestroyCall(c);
      m.retired.clear();
      m.retired.swap(m.calls);  // the nodes, and pointers to them, move with the swap
    }
    Call c;
    c.desc = s.desc;
    c.a = s.a;
    c.algo = &s.algo;
    c.ops = ops;
    c.n = N;
    c.k = K;
    c.t = T;
    LLMRT_RETURN_IF_ERROR(m.MakeLayouts(ops, K, N, T, ldo, &c.b, &c.d));
    cublasLtMatmulHeuristicResult_t r{};
    const cublasStatus_t check = m.api->MatmulAlgoCheck(m.handle, s.desc, s.a, c.b, c.d, c.d, &s.algo, &r);
    if (check != CUBLAS_STATUS_SUCCESS || r.workspaceSize > kWorkspaceBytes) {
      // Kept with null layouts: the caller's kernel serves this T (logged once per T).
      Log(LogLevel::kWarning, absl::StrCat("cuBLASLt: the algorithm of the ", OperandsName(ops), " weight [", N, ", ",
                                           K, "] does not run at T = ", T, " (", m.Name(check),
                                           "); these rows run the backend's own kernel"));
      m.DestroyCall(c);
    }
    found = m.calls.emplace(key, c).first;
  }
  return found->second.b != nullptr ? &found->second : static_cast<const Call*>(nullptr);
}

absl::Status CublasLtGemm::Run(const Call& c, const void* w, const void* x, float* out, void* stream) {
  if (c.ops != Operands::kBf16) return absl::InternalError("CublasLtGemm::Run on a plan that is not BF16 to float32");
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  return Matmul(c, w, x, out, stream);
}

absl::Status CublasLtGemm::RunBf16Out(const Call& c, const void* w, const void* x, uint16_t* out, void* stream) {
  if (c.ops != Operands::kBf16Out) return absl::InternalError("CublasLtGemm::RunBf16Out on a plan of another output");
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  return Matmul(c, w, x, out, stream);
}

absl::Status CublasLtGemm::RunFp8(const Call& c, const void* w, const float* w_scales, const void* x,
                                  const float* x_scales, float* out, void* stream) {
  if (c.ops != Operands::kFp8Block128) return absl::InternalError("CublasLtGemm::RunFp8 on a BF16 plan");
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  // The descriptor is the shape's: its scale pointers are this call's until the next call sets
  // them (cublasLtMatmul reads them when it enqueues, under the same lock).
  LLMRT_RETURN_IF_ERROR(m.Check(
      m.api->MatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof(w_scales)),
      "cublasLtMatmulDescSetAttribute (A_SCALE_POINTER)"));
  LLMRT_RETURN_IF_ERROR(m.Check(
      m.api->MatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof(x_scales)),
      "cublasLtMatmulDescSetAttribute (B_SCALE_POINTER)"));
  return Matmul(c, w, x, out, stream);
}

absl::Status CublasLtGemm::Matmul(const Call& c, const void* w, const void* x, void* out, void* stream) {
  Impl& m = *impl_;
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t s = m.api->Matmul(m.handle, c.desc, &alpha, w, c.a, x, c.b, &beta, out, c.d, out, c.d, c.algo,
                                         m.workspace, kWorkspaceBytes, static_cast<cudaStream_t>(stream));
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cublasLtMatmul (", OperandsName(c.ops), " weight [", c.n, ", ", c.k, "], ",
                                          c.t, " rows): ", m.Name(s)));
}

int64_t CublasLtGemm::shapes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int64_t>(impl_->shapes.size());
}

int64_t CublasLtGemm::shapes_taken() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  int64_t n = 0;
  for (const auto& [key, s] : impl_->shapes) n += s.taken ? 1 : 0;
  return n;
}

}  // namespace llmrt
