#include "src/runtime/runtime.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/backend/registry.h"
#include "src/kv/kv_sizing.h"
#include "src/kv/page_pool.h"
#include "src/model/kv_scales.h"
#include "src/util/errors.h"
#include "src/util/log.h"
#include "src/util/status.h"
#if LLMRT_HAVE_MPI
#include "src/parallel/mpi_communicator.h"
#endif
#if LLMRT_HAVE_NCCL
#include "src/parallel/nccl_communicator.h"
#endif

namespace llmrt {

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(const std::string& model_dir, const RuntimeOptions& options) {
  if (FindKvCodec(options.policy.kv_codec) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("no KV codec with id ", options.policy.kv_codec));
  }
  if (options.page_size < 1 || options.page_size > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("page_size_tokens ", options.page_size, " is outside [1, 4096]"));
  }
  if (options.max_sessions < 1 || options.max_tokens_per_step < 1 || options.num_threads < 0) {
    return absl::InvalidArgumentError("max_sessions and max_tokens_per_step must be positive, num_threads >= 0");
  }
  if (options.world_size < 1 || options.world_size > InProcessGroup::kMaxRanks) {
    return absl::InvalidArgumentError(absl::StrCat("world_size ", options.world_size, " is outside [1, ",
                                                   InProcessGroup::kMaxRanks, "]"));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank, " is outside the world of ",
                                                   options.world_size));
  }
  if (options.tensor_parallel < 1 || options.tensor_parallel > InProcessGroup::kMaxRanks) {
    return absl::InvalidArgumentError(absl::StrCat("tensor_parallel ", options.tensor_parallel, " is outside [1, ",
                                                   InProcessGroup::kMaxRanks, "]"));
  }
  if (options.world_size > 1 && options.tensor_parallel != 1 && options.tensor_parallel != options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor_parallel ", options.tensor_parallel, " with world_size ",
                                                   options.world_size, ": a multi-process group runs one rank per ",
                                                   "process (tensor_parallel 1 or world_size)"));
  }
  if (options.collective_timeout_ms < 1) return absl::InvalidArgumentError("collective_timeout_ms must be positive");
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->options_ = options;
  absl::Status st = rt->Init(model_dir);
  // AUTO means "the best backend that can run this": a device backend that refuses something the
  // model or the policies need (a weight format or KV codec it has no kernel for) gives way to the
  // CPU, which runs everything. An explicit backend choice fails instead.
  if (!st.ok() && st.code() == absl::StatusCode::kUnimplemented && options.backend == BackendKind::kAuto &&
      rt->created_kind_ != BackendKind::kCpu) {
    Log(LogLevel::kWarning, absl::StrCat("the ", BackendKindName(rt->created_kind_), " backend cannot run ", model_dir,
                                         " (", st.message(), "); using the CPU backend"));
    rt.reset(new Runtime());
    rt->options_ = options;
    rt->options_.backend = BackendKind::kCpu;
    st = rt->Init(model_dir);
  }
  LLMRT_RETURN_IF_ERROR(st);
  return rt;
}

absl::Status Runtime::Init(const std::string& model_dir) {
  if (const char* graphs = std::getenv("LLMRT_CUDA_GRAPHS"); graphs != nullptr && std::string(graphs) == "0") {
    options_.capture_decode = false;
  }
  const RuntimeOptions& o = options_;
  LLMRT_ASSIGN_OR_RETURN(Checkpoint ck, o.synthetic_seed ? Checkpoint::Synthetic(model_dir, *o.synthetic_seed)
                                                           : Checkpoint::Open(model_dir));
  checkpoint_ = std::make_unique<Checkpoint>(std::move(ck));
  // The ranks: in-process ones share this process's threads; a multi-process rank is one of them.
  const bool multi_process = o.world_size > 1;
  const int local = multi_process ? 1 : o.tensor_parallel;
  // num_threads is the process's budget: each in-process rank gets its share.
  int threads = o.num_threads;
  if (local > 1) {
    const int total = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, total / local);
  }
  ranks_.resize(static_cast<size_t>(local));
  LLMRT_RETURN_IF_ERROR(CreateBackends(threads));
  LLMRT_RETURN_IF_ERROR(ConnectRanks());
  for (int r = 0; r < local; ++r) {
    ShardPlan plan;
    plan.rank = multi_process ? o.rank : r;
    plan.size = multi_process ? o.world_size : local;
    plan.expert_parallel = o.expert_parallel;
    LLMRT_RETURN_IF_ERROR(InitRank(r, plan));
  }
  rank_threads_ = std::make_unique<RankThreads>(local);
  backend_ = ranks_[0].backend.get();
  model_ = ranks_[0].model.get();
  store_ = ranks_[0].store.get();
  workspace_ = ranks_[0].workspace.get();
  const ModelConfig& c = model_->config();

  switch (store_->codec().scale_kind()) {
    case KvScaleKind::kNone: kv_scale_source_ = KvScaleSource::kNone; break;
    case KvScaleKind::kPerTile: kv_scale_source_ = KvScaleSource::kPerTile; break;
    case KvScaleKind::kPerLayer: {
      LLMRT_ASSIGN_OR_RETURN(std::vector<float> scales, CheckpointKvScales(*checkpoint_));
      kv_scale_source_ = scales.empty() ? KvScaleSource::kCalibrated : KvScaleSource::kCheckpoint;
      for (Replica& k : ranks_) {
        for (size_t l = 0; l < scales.size(); ++l) LLMRT_RETURN_IF_ERROR(k.store->SetScale(static_cast<int64_t>(l), scales[l]));
      }
      break;
    }
  }

  // Everything is loaded: the checkpoint's file mappings now live only as long as weights that
  // use them in place (none when the weights were copied into huge pages).
  checkpoint_.reset();

  // The step's metadata, built once on the host and uploaded to every rank.
  const int64_t T = o.max_tokens_per_step;
  const int64_t step_rows = std::min<int64_t>(o.max_sessions, T);
  StepBatch::Limits limits;
  limits.max_tokens = T;
  limits.max_seqs = step_rows + 1;  // and the padding sequence
  limits.max_page_entries =
      step_rows * StepBatch::MaxPagesPerSeq(c.max_position_embeddings, o.page_size, store_->num_pages()) + 1;
  limits.max_logit_rows = T;
  LLMRT_ASSIGN_OR_RETURN(batch_, StepBatch::Create(*backend_, limits));
  for (size_t r = 1; r < ranks_.size(); ++r) {
    LLMRT_ASSIGN_OR_RETURN(ranks_[r].batch, batch_.AllocateFor(*ranks_[r].backend));
  }
  for (Replica& k : ranks_) {
    absl::StatusOr<Tensor> logits = k.backend->Allocate(DType::kF32, {step_rows, c.vocab_size});
    if (!logits.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat("the logits buffer (", step_rows, " x ", c.vocab_size,
                                                       " floats) does not fit: ", logits.status().message()));
    }
    k.logits = *logits;
  }
  absl::StatusOr<Tensor> ids = backend_->Allocate(DType::kI32, {step_rows});
  if (!ids.ok()) return absl::ResourceExhaustedError(absl::StrCat("the sampled ids: ", ids.status().message()));
  sampled_ids_ = *ids;
  host_ids_.reserve(static_cast<size_t>(step_rows));
  host_logits_.reserve(static_cast<size_t>(step_rows * c.vocab_size));
  if (process_comm_) {
    // The pass's status, summed over the processes after every pass (Forward).
    LLMRT_ASSIGN_OR_RETURN(pass_flag_, backend_->Allocate(DType::kF32, {1}));
  }

  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<KvTracker> tracker = o.tracker ? o.tracker : std::shared_ptr<KvTracker>(MakeNoopTracker());
  kv_ = std::make_unique<KvManager>(std::make_unique<PagePool>(static_cast<int32_t>(store_->num_pages())),
                                    o.page_size, std::move(tracker), o.prefix_sharing);
  return absl::OkStatus();
}

absl::Status Runtime::CreateBackends(int threads) {
  const RuntimeOptions& o = options_;
  const bool multi_process = o.world_size > 1;
  const int local = static_cast<int>(ranks_.size());
  BackendKind kind = o.backend;
  // AUTO across processes: a CUDA (NCCL) id asks for device ranks; another id, or none, for CPU
  // ranks through MPI.
  const bool nccl_id = o.comm_id.has_value() && o.comm_id->kind == CommIdKind::kNccl;
  if (multi_process && kind == BackendKind::kAuto && !nccl_id) kind = BackendKind::kCpu;
  const int devices = BackendDeviceCount(kind);
  for (int r = 0; r < local; ++r) {
    BackendOptions bo;
    bo.num_threads = threads;
    bo.activations = o.activations;
    bo.weight_memory = o.weight_memory;
    if (const char* tiles = std::getenv("LLMRT_CPU_EXACT_TILES"); tiles != nullptr && std::string(tiles) == "0") {
      bo.exact_on_tiles = false;
    }
    if (const char* attn = std::getenv("LLMRT_CUDA_ATTENTION"); attn != nullptr && *attn != '\0') {
      const std::string v = attn;
      if (v == "tc") {
        bo.device_attention = BackendOptions::DeviceAttention::kTensorCore;
      } else if (v == "tc-bf16") {
        bo.device_attention = BackendOptions::DeviceAttention::kTensorCoreBf16;
      } else if (v == "wgmma") {
        bo.device_attention = BackendOptions::DeviceAttention::kWgmma;
      } else if (v == "scalar") {
        bo.device_attention = BackendOptions::DeviceAttention::kScalar;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("LLMRT_CUDA_ATTENTION=", v, " in the environment: expected tc, tc-bf16, wgmma or scalar"));
      }
    }
    if (const char* st = std::getenv("LLMRT_CUDA_ATTENTION_STAGES"); st != nullptr && *st != '\0') {
      const std::string v = st;
      if (v != "auto" && v != "1" && v != "2") {
        return absl::InvalidArgumentError(
            absl::StrCat("LLMRT_CUDA_ATTENTION_STAGES=", v, " in the environment: expected auto, 1 or 2"));
      }
      bo.device_attention_stages = v == "auto" ? 0 : v == "1" ? 1 : 2;
    }
    if (const char* moe = std::getenv("LLMRT_CUDA_MOE"); moe != nullptr && *moe != '\0') {
      const std::string v = moe;
      if (v != "mma" && v != "wgmma" && v != "gemv") {
        return absl::InvalidArgumentError(
            absl::StrCat("LLMRT_CUDA_MOE=", v, " in the environment: expected mma, wgmma or gemv"));
      }
      bo.device_moe_mma = v != "gemv";
      bo.device_moe_wgmma = v == "wgmma";
    }
    if (const char* tile = std::getenv("LLMRT_CUDA_MOE_TILE"); tile != nullptr && *tile != '\0') {
      const std::string v = tile;
      if (v != "auto" && v != "32" && v != "64" && v != "128") {
        return absl::InvalidArgumentError(
            absl::StrCat("LLMRT_CUDA_MOE_TILE=", v, " in the environment: expected auto, 32, 64 or 128"));
      }
      bo.device_moe_tile_rows = v == "auto" ? 0 : v == "32" ? 32 : v == "64" ? 64 : 128;
    }
    if (const char* mla = std::getenv("LLMRT_CUDA_MLA_PREFILL"); mla != nullptr && *mla != '\0') {
      const std::string v = mla;
      int64_t n = 0;
      if (v == "absorbed") {
        bo.device_mla_expanded_min_tokens = 0;
      } else if (v == "expanded") {
        bo.device_mla_expanded_min_tokens = BackendOptions::kMlaExpandedByCount;
      } else if (absl::SimpleAtoi(v, &n) && n >= 1) {
        bo.device_mla_expanded_min_tokens = n;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "LLMRT_CUDA_MLA_PREFILL=", v, " in the environment: expected absorbed, expanded or a number of tokens >= 1"));
      }
    }
    if (const char* gqa = std::getenv("LLMRT_CUDA_GQA_PREFILL"); gqa != nullptr && *gqa != '\0') {
      const std::string v = gqa;
      int64_t n = 0;
      if (v == "tokens") {
        bo.device_gqa_flash_min_tokens = 0;
      } else if (v == "flash") {
        bo.device_gqa_flash_min_tokens = BackendOptions::kGqaFlashTokens;
      } else if (absl::SimpleAtoi(v, &n) && n >= 1) {
        bo.device_gqa_flash_min_tokens = n;
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "LLMRT_CUDA_GQA_PREFILL=", v, " in the environment: expected tokens, flash or a number of tokens >= 1"));
      }
    }
    if (const char* dsa = std::getenv("LLMRT_CUDA_DSA_SCORES"); dsa != nullptr && *dsa != '\0') {
      const std::string v = dsa;
      if (v != "tiled" && v != "staged" && v != "thread" && v != "mma") {
        return absl::InvalidArgumentError(
            absl::StrCat("LLMRT_CUDA_DSA_SCORES=", v, " in the environment: expected tiled, staged, thread or mma"));
      }
      bo.device_dsa_scores = v == "tiled" ? 0 : v == "staged" ? 1 : v == "thread" ? 2 : 3;
    }
    if (const char* quant = std::getenv("LLMRT_CUDA_QUANT"); quant != nullptr && *quant != '\0') {
      const std::string v = quant;
      if (v != "mma" && v != "gemv") {
        return absl::InvalidArgumentError(absl::StrCat("LLMRT_CUDA_QUANT=", v, " in the environment: expected mma or gemv"));
      }
      bo.device_quant_mma = v == "mma";
    }
    // In-process rank r runs on device r; process rank p on device p mod the host's count (one
    // process per device, ranks numbered host by host).
    if (devices > 0) bo.device = multi_process ? o.rank % devices : r;
    LLMRT_ASSIGN_OR_RETURN(ranks_[r].backend, CreateBackend(kind, bo));
    if (r > 0) continue;
    created_kind_ = ranks_[0].backend->kind();
    if (created_kind_ != BackendKind::kCpu && local > devices) {
      // Unimplemented: AUTO then falls back to CPU ranks (Create); an explicit choice fails here.
      return UnsupportedError(absl::StrCat("tensor_parallel ", local, " runs one rank per ",
                                           ranks_[0].backend->name(), " device, and this host has ", devices,
                                           devices == 1 ? " device" : " devices"));
    }
  }
  return absl::OkStatus();
}

absl::Status Runtime::ConnectRanks() {
  const RuntimeOptions& o = options_;
  const bool multi_process = o.world_size > 1;
  const int local = static_cast<int>(ranks_.size());
  const std::chrono::milliseconds timeout(o.collective_timeout_ms);
  const bool device = created_kind_ != BackendKind::kCpu;
  const bool nccl_id = o.comm_id.has_value() && o.comm_id->kind == CommIdKind::kNccl;
  if (multi_process && !device) {
    if (nccl_id) {
      return UnsupportedError("comm_id was made for CUDA ranks (an NCCL id), but this runtime's ranks run on the CPU "
                              "backend (through MPI): make the id with llm_comm_id_create(LLM_BACKEND_CPU), or run "
                              "the ranks on LLM_BACKEND_CUDA");
    }
    if (o.comm_id.has_value()) LLMRT_RETURN_IF_ERROR(CheckMpiCommId(o.comm_id->bytes));
#if LLMRT_HAVE_MPI
    LLMRT_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> mpi,
                           MpiCommunicator::Create(o.world_size, timeout,
                                                   o.comm_id.has_value() ? &o.comm_id->bytes : nullptr));
    if (mpi->rank() != o.rank) {
      return absl::InvalidArgumentError(absl::StrCat("rank is ", o.rank, " but this process is MPI rank ", mpi->rank(),
                                                     " of ", mpi->size()));
    }
    process_comm_ = std::move(mpi);
#else
    return UnsupportedError(absl::StrCat("world_size ", o.world_size, " needs the MPI communicator, which this build ",
                                         "of llmrt does not have (configure with LLMRT_MPI and libopenmpi-dev)"));
#endif
  } else if (multi_process) {
    if (!nccl_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          "world_size ", o.world_size, " on the ", ranks_[0].backend->name(), " backend: the processes join through ",
          "NCCL and need comm_id, made on one process with llm_comm_id_create(LLM_BACKEND_CUDA) and passed to every "
          "rank"));
    }
#if LLMRT_HAVE_NCCL
    NcclId id;
    std::memcpy(id.data(), o.comm_id->bytes.data(), id.size());
    const int devices = BackendDeviceCount(created_kind_);
    LLMRT_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                           NcclCommunicator::Create(id, o.rank, o.world_size, o.rank % std::max(devices, 1), timeout));
    nccl->set_stream(ranks_[0].backend->device_stream());
    process_comm_ = std::move(nccl);
#else
    return UnsupportedError("multi-process CUDA ranks need the NCCL communicator, which this build of llmrt does not "
                            "have (the CUDA toolkit it was built with has no nccl.h)");
#endif
  } else if (local > 1 && !device) {
    LLMRT_ASSIGN_OR_RETURN(group_, InProcessGroup::Create(local, timeout));
  } else if (local > 1) {
#if LLMRT_HAVE_NCCL
    // One NCCL group over this process's devices. Each rank's initialization waits for all of
    // them, so they join at once, each from a thread of its own.
    LLMRT_ASSIGN_OR_RETURN(NcclId id, NcclUniqueId());
    std::vector<absl::StatusOr<std::unique_ptr<NcclCommunicator>>> comms(static_cast<size_t>(local));
    {
      std::vector<std::thread> joining;
      joining.reserve(static_cast<size_t>(local));
      for (int r = 0; r < local; ++r) {
        joining.emplace_back([&comms, &id, r, local, timeout] {
          comms[r] = NcclCommunicator::Create(id, r, local, /*device=*/r, timeout);
        });
      }
      for (std::thread& t : joining) t.join();
    }
    for (int r = 0; r < local; ++r) {
      if (!comms[r].ok()) {
        return absl::Status(comms[r].status().code(), absl::StrCat("NCCL rank ", r, " of ", local, ": ",
                                                                   comms[r].status().message()));
      }
      (*comms[r])->set_stream(ranks_[r].backend->device_stream());
      ranks_[r].comm = std::move(*comms[r]);
    }
#else
    return UnsupportedError(absl::StrCat("tensor_parallel ", local, " on the ", ranks_[0].backend->name(),
                                         " backend needs the NCCL communicator, which this build of llmrt does not "
                                         "have (the CUDA toolkit it was built with has no nccl.h)"));
#endif
  }
  for (int r = 0; r < local; ++r) {
    Replica& k = ranks_[r];
    if (group_) {
      LLMRT_ASSIGN_OR_RETURN(k.comm, group_->Join(r));
    }
    if (k.comm) {
      k.backend->set_communicator(k.comm.get());
    } else if (process_comm_) {
      k.backend->set_communicator(process_comm_.get());
    }
  }
  return absl::OkStatus();
}

absl::Status Runtime::InitRank(int index, const ShardPlan& plan) {
  const RuntimeOptions& o = options_;
  Replica& k = ranks_[index];
  LoadOptions lo;
  lo.prefill_experts = o.policy.prefill_experts;
  lo.decode_experts = o.policy.decode_experts;
  lo.shard = plan;
  LLMRT_ASSIGN_OR_RETURN(k.model, LoadModel(*checkpoint_, *k.backend, lo));

  // The KV store: as many whole pages as the budget holds (per rank: GQA ranks store their KV
  // heads only, so the same budget holds more tokens at a higher degree).
  const KvCodec& codec = *FindKvCodec(o.policy.kv_codec);
  const KvSizing sizing = SizeKvCache(codec, k.model->kv_shape(), o.kv_budget_bytes, o.page_size);
  if (sizing.pages == 0) {
    return absl::InvalidArgumentError(absl::StrCat("kv_budget_bytes ", o.kv_budget_bytes, " holds no page (one page is ",
                                                   sizing.page_bytes, " bytes)"));
  }
  // Slots (page * page_size + row) are int32 in the step metadata, the spare page included.
  if ((sizing.pages + 1) * static_cast<uint64_t>(o.page_size) > static_cast<uint64_t>(INT32_MAX)) {
    return absl::OutOfRangeError(absl::StrCat("kv_budget_bytes ", o.kv_budget_bytes, " gives ", sizing.pages,
                                              " pages of ", o.page_size, " tokens: more than 2^31 cache slots"));
  }
  KvStoreOptions so;
  so.codec = &codec;
  so.shape = k.model->kv_shape();
  so.page_size = o.page_size;
  so.num_pages = static_cast<int64_t>(sizing.pages);
  so.fresh_rows = codec.lossy() && o.policy.attend_own_rows_bf16 ? o.max_tokens_per_step : 0;
  LLMRT_ASSIGN_OR_RETURN(k.store, KvStore::Create(*k.backend, so));

  // The buffers of a forward pass, sized once for the largest pass.
  const int64_t T = o.max_tokens_per_step;
  LLMRT_ASSIGN_OR_RETURN(k.workspace, Workspace::Create(*k.backend, k.model->WorkspaceBytes(T, T)));
  return absl::OkStatus();
}

Runtime::~Runtime() {
  std::lock_guard<std::mutex> step_lock(step_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  if (kv_) {
    for (auto& [id, s] : sessions_) ReleasePages(s.get());
  }
  sessions_.clear();
  if (created_kind_ != BackendKind::kCpu && ranks_.size() > 1) {
    // NCCL may wait for every rank of a group while tearing one down: this process's ranks let
    // go of their communicators together, each on a thread of its own.
    std::vector<std::thread> leaving;
    for (Replica& k : ranks_) {
      if (k.comm) leaving.emplace_back([&k] { k.comm.reset(); });
    }
    for (std::thread& t : leaving) t.join();
  }
}

int64_t Runtime::LiveSessions() const {
  int64_t live = 0;
  for (const auto& [id, s] : sessions_) live += s->destroy_requested_ ? 0 : 1;
  return live;
}

RuntimeInfo Runtime::Info() const {
  std::lock_guard<std::mutex> lock(mu_);
  const ModelConfig& c = model_->config();
  RuntimeInfo i;
  i.architecture = c.architecture;
  i.model_type = c.model_type;
  i.backend = backend_->kind();
  i.weight_memory = backend_->weight_memory();
  i.kv_codec = options_.policy.kv_codec;
  i.vocab_size = c.vocab_size;
  i.num_layers = c.num_layers;
  i.num_parameters = model_->num_parameters();
  i.weight_bytes = model_->weight_bytes();
  i.kv_bytes_per_token = store_->bytes_per_token();
  i.page_size = options_.page_size;
  i.pages_total = kv_->pool().num_pages();
  i.pages_free = kv_->pool().num_free();
  i.kv_capacity_tokens = static_cast<uint64_t>(i.pages_total * i.page_size);
  i.num_sessions = LiveSessions();
  i.max_position_embeddings = c.max_position_embeddings;
  i.pages_shared = kv_->pool().num_shared();
  i.prefix_lookup_tokens = kv_->prefix_stats().lookup_tokens;
  i.prefix_hit_tokens = kv_->prefix_stats().hit_tokens;
  i.integrity_violations = integrity_violations_;
  i.preemptions = preemptions_;
  i.integrity_check_ns = integrity_check_ns_;
  i.resident_weight_bytes = model_->resident_bytes();
  i.policy = options_.policy;
  i.kv_scale_source = kv_scale_source_;
  i.workspace_bytes = workspace_->capacity();
  i.padded_tokens = padded_tokens_;
  i.tensor_parallel = options_.world_size > 1 ? options_.world_size : options_.tensor_parallel;
  i.expert_parallel = options_.expert_parallel;
  i.rank = options_.rank;
  for (uint64_t b : model_->resident_bytes()) i.rank_weight_bytes += b;
  i.rank_kv_bytes_per_token = store_->bytes_per_token();
  i.rank_kv_capacity_tokens = i.kv_capacity_tokens;
  i.collective_ns = backend_->collective_ns();
  return i;
}

absl::StatusOr<Session*> Runtime::CreateSession(const SessionOptions& options) {
  const SamplingParams& sp = options.sampling;
  if (!(sp.temperature >= 0.0f) || !(sp.top_p > 0.0f && sp.top_p <= 1.0f) ||
      !(sp.min_p >= 0.0f && sp.min_p <= 1.0f) || sp.top_k < 0) {
    return absl::InvalidArgumentError(
        "sampling options out of range: temperature >= 0, top_k >= 0, 0 < top_p <= 1, 0 <= min_p <= 1");
  }
  const int64_t vocab = model_->config().vocab_size;
  for (int32_t t : options.stop_tokens) {
    if (t < 0 || t >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("stop token ", t, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (LiveSessions() >= options_.max_sessions) {
    return absl::OutOfRangeError(absl::StrCat("max_sessions (", options_.max_sessions, ") sessions are alive"));
  }
  const uint64_t id = next_session_id_++;
  auto s = std::make_unique<Session>(this, id, options);
  Session* raw = s.get();
  sessions_.emplace(id, std::move(s));
  return raw;
}

void Runtime::ReleasePages(Session* s) { kv_->ReleaseAll(s->id_, s->pages_); }

void Runtime::FinishDestroy(Session* s) {
  ReleasePages(s);
  sessions_.erase(s->id_);
}

void Runtime::DestroySession(Session* session) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sessions_.find(session->id());
  if (it == sessions_.end() || it->second.get() != session || session->destroy_requested_) return;
  if (session->in_flight_) {
    session->destroy_requested_ = true;  // the running step frees it at commit
    return;
  }
  FinishDestroy(session);
}

bool Runtime::IsLiveSession(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  return FindById(id) != nullptr;
}

Session* Runtime::FindById(uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->destroy_requested_) return nullptr;
  return it->second.get();
}

absl::Status Runtime::Append(Session* s, absl::Span<const int32_t> tokens) {
  const int64_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", tokens[i], " at index ", i, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  switch (s->state_) {
    case SessionState::kDecoding:
      return absl::FailedPreconditionError("the session is generating; wait for it to finish or cancel it");
    case SessionState::kCancelled:
      return absl::FailedPreconditionError("the session was cancelled");
    case SessionState::kFailed:
      return absl::FailedPreconditionError("the session failed; destroy it");
    default:
      break;
  }
  if (s->recomputing_) {
    return absl::FailedPreconditionError("the session is generating (recomputing after preemption)");
  }
  const size_t extra = s->unfed_token_ ? 1 : 0;
  const uint64_t total = s->context_.size() + s->pending_.size() + extra + tokens.size();
  if (total > static_cast<uint64_t>(model_->config().max_position_embeddings)) {
    return absl::OutOfRangeError(absl::StrCat("the context would hold ", total,
                                              " tokens, past max_position_embeddings ",
                                              model_->config().max_position_embeddings));
  }
  if (tokens.empty()) return absl::OkStatus();
  if (s->unfed_token_) {
    s->pending_.push_back(*s->unfed_token_);
    s->unfed_token_.reset();
  }
  s->pending_.insert(s->pending_.end(), tokens.begin(), tokens.end());
  s->state_ = SessionState::kPrefill;
  s->num_generated_ = 0;
  return absl::OkStatus();
}

absl::Status Runtime::Cancel(Session* s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (s->state_ == SessionState::kCancelled) return absl::OkStatus();
  s->state_ = SessionState::kCancelled;
  s->pending_.clear();
  s->report_cancel_ = true;
  s->recomputing_ = false;
  if (!s->in_flight_) ReleasePages(s);  // else the running step releases them at commit
  return absl::OkStatus();
}

absl::Status Runtime::CopyLogits(const Session* s, float* out, size_t capacity, size_t* count) const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = static_cast<size_t>(model_->config().vocab_size);
  *count = n;
  if (!s->options_.keep_logits) {
    return absl::FailedPreconditionError("the session was created with LLM_SAMPLING_NO_LOGITS: its logits stay where they are computed");
  }
  if (s->logits_.empty()) return absl::FailedPreconditionError("the session has not sampled a position yet");
  if (capacity < n) {
    return absl::ResourceExhaustedError(absl::StrCat("logits need ", n, " floats, buffer holds ", capacity));
  }
  std::memcpy(out, s->logits_.data(), n * sizeof(float));
  return absl::OkStatus();
}

Runtime::SessionSnapshot Runtime::Snapshot(const Session* s) const {
  std::lock_guard<std::mutex> lock(mu_);
  return {s->state_, s->id_, static_cast<uint32_t>(s->context_.size()),
          static_cast<uint32_t>(s->pending_.size()), s->num_generated_,
          static_cast<uint32_t>(s->pages_.num_pages())};
}

std::vector<int32_t> Runtime::FailedPages(const Session* s) const {
  std::lock_guard<std::mutex> lock(mu_);
  return s->failed_pages_;
}

absl::Status Runtime::InjectRankFault(int rank) {
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("no in-process rank ", rank, " (this runtime has ", ranks_.size(), ")"));
  }
  std::lock_guard<std::mutex> lock(fault_mu_);
  fail_rank_ = rank;
  return absl::OkStatus();
}

absl::Status Runtime::InjectKvFault(KvFault fault, const std::vector<int64_t>& args) {
  std::lock_guard<std::mutex> lock(mu_);
  auto entry = [&](int64_t id, int64_t index) -> absl::StatusOr<PageRef*> {
    Session* s = FindById(static_cast<uint64_t>(id));
    if (s == nullptr) return absl::InvalidArgumentError(absl::StrCat("no session with id ", id));
    auto& e = s->pages_.mutable_entries();
    if (index < 0 || index >= static_cast<int64_t>(e.size())) {
      return absl::InvalidArgumentError(absl::StrCat("session ", id, " has no page-table entry ", index));
    }
    return &e[index];
  };
  switch (fault) {
    case KvFault::kFreeMappedPage: {
      if (args.size() != 2) return absl::InvalidArgumentError("free-mapped-page takes {session id, entry}");
      LLMRT_ASSIGN_OR_RETURN(PageRef * ref, entry(args[0], args[1]));
      kv_->pool().ForceFree(ref->page);  // the session still maps it: the real-world race
      return absl::OkStatus();
    }
    case KvFault::kCorruptEntry: {
      if (args.size() != 3) return absl::InvalidArgumentError("corrupt-entry takes {session id, entry, page}");
      LLMRT_ASSIGN_OR_RETURN(PageRef * ref, entry(args[0], args[1]));
      if (args[2] < 0 || args[2] >= kv_->pool().num_pages()) return absl::InvalidArgumentError("no such page");
      ref->page = static_cast<int32_t>(args[2]);
      return absl::OkStatus();
    }
    case KvFault::kSwapPages: {
      if (args.size() != 4) return absl::InvalidArgumentError("swap-pages takes {id a, entry a, id b, entry b}");
      LLMRT_ASSIGN_OR_RETURN(PageRef * a, entry(args[0], args[1]));
      LLMRT_ASSIGN_OR_RETURN(PageRef * b, entry(args[2], args[3]));
      std::swap(a->page, b->page);  // the mapping is swapped; each side still expects its own tag
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError("unknown fault");
}

}  // namespace llmrt
