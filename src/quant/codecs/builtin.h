// The built-in KV codecs, registered by src/quant/kv_codec.cc.
#ifndef LLMRT_QUANT_CODECS_BUILTIN_H_
#define LLMRT_QUANT_CODECS_BUILTIN_H_

#include "src/quant/kv_codec.h"

namespace llmrt::codecs {

const KvCodec& F32();       // exact reference storage
const KvCodec& Bf16();      // the default: two bytes per value
const KvCodec& Fp8();       // e4m3, one float32 scale per layer: half the bytes of BF16
const KvCodec& Fp8Tiled();  // e4m3 with a float32 scale per tile of each row; rope key in BF16

}  // namespace llmrt::codecs

#endif  // LLMRT_QUANT_CODECS_BUILTIN_H_
