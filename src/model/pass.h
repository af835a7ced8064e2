// What the blocks of one forward pass share, and the KV write every attention block ends with.
#ifndef LLMRT_MODEL_PASS_H_
#define LLMRT_MODEL_PASS_H_

#include <initializer_list>

#include "src/backend/backend.h"
#include "src/model/model.h"
#include "src/model/workspace.h"

namespace llmrt {

struct PassContext {
  Backend& be;
  const ForwardBatch& batch;
  const KvCacheView& cache;
  Workspace& ws;
};

// Writes a layer's cache rows, calibrating the layer's per-layer scale first if it has none
// (an explicit step of the per-layer FP8 codec; see KvCacheView).
void WriteKv(PassContext& ctx, int64_t layer, std::initializer_list<Tensor> parts);

}  // namespace llmrt

#endif  // LLMRT_MODEL_PASS_H_
