package llmrt

// #cgo pkg-config: llmrt
// #include <stdlib.h>
// #include "llmrt/llmrt.h"
import "C"

import (
	"strconv"
	"strings"
)

// Version is the version of the loaded library ("MAJOR.MINOR.PATCH"), which may differ from the
// header the binding was compiled against (HeaderVersion).
func Version() string { return C.GoString(C.llm_version()) }

// The header version this binding declares by hand; the ABI test compares these with the header.
const (
	ABIVersionMajor = 1
	HeaderVersion   = "0.1.0"
	versionMajor    = 0
	versionMinor    = 1
	versionPatch    = 0
)

// Backend selects where a runtime computes (llm_runtime_options.backend).
type Backend int32

const (
	BackendAuto Backend = 0 // CUDA when built in and a device is present, else CPU
	BackendCPU  Backend = 1
	BackendCUDA Backend = 2
)

// KVDType is the storage of the paged KV cache (LLM_KV_DTYPE_*).
type KVDType int32

const (
	KVDTypeAuto         KVDType = 0 // BF16
	KVDTypeBF16         KVDType = 1
	KVDTypeF32          KVDType = 2 // exact reference storage, for verification
	KVDTypeFP8E4M3      KVDType = 3 // one byte per value, one scale per layer
	KVDTypeFP8E4M3Tiled KVDType = 4 // FP8 with a scale per 128-value tile of each token
)

// KVIntegrity selects the runtime's KV page verification (LLM_KV_INTEGRITY_*).
type KVIntegrity int32

const (
	KVIntegrityOff  KVIntegrity = 0
	KVIntegrityTags KVIntegrity = 1
)

// KVPressure is what a step does with a session that finds no free KV page (LLM_KV_PRESSURE_*).
type KVPressure int32

const (
	KVPressureFail    KVPressure = 0 // the session's result has status KVExhausted, the session is unchanged
	KVPressureQueue   KVPressure = 1 // a prompt waits until pages for all of it are free
	KVPressurePreempt KVPressure = 2 // newer sessions give their pages back and recompute later
)

// WeightFormat is the storage of the routed experts for one phase (LLM_WEIGHTS_*).
type WeightFormat int32

const (
	WeightsAsStored WeightFormat = 0
	WeightsINT4G32  WeightFormat = 1
	WeightsINT4G128 WeightFormat = 2
)

// Activations says how matmuls with quantized (INT4, FP8) weights treat their activations
// (LLM_ACTIVATIONS_*).
type Activations int32

const (
	// ActivationsExact keeps float32 activations: the reference numerics.
	ActivationsExact Activations = 0
	// ActivationsINT8 rounds activations to int8 per 32 values and multiplies INT4 codes with
	// integer dot products (W4A8): faster on CPUs, slightly different numerics.
	ActivationsINT8 Activations = 1
	// ActivationsBF16 rounds the activations of matmuls with BF16 weights to bfloat16 and
	// multiplies with bf16 dot products (the MoE router stays float32).
	ActivationsBF16 Activations = 2
	// ActivationsFP8 rounds the activations of matmuls with FP8 block-scaled weights to e4m3
	// codes, one float32 scale per row and 128 columns, and scales each block's float32 sum of
	// code products by both block scales (the FP8 block-scaled GEMM); BF16 weights as under
	// ActivationsBF16, INT4 and F32 weights unaffected.
	ActivationsFP8 Activations = 3
)

// WeightMemory says where the CPU backend keeps the weights (LLM_WEIGHT_MEMORY_*); device
// backends keep them in device memory.
type WeightMemory int32

const (
	// WeightMemoryAuto is WeightMemoryHugePages where the kernel offers transparent huge pages,
	// else WeightMemoryMapped.
	WeightMemoryAuto WeightMemory = 0
	// WeightMemoryMapped reads the weights in place from the checkpoint's file mapping: no copy,
	// pages shared between processes.
	WeightMemoryMapped WeightMemory = 1
	// WeightMemoryHugePages copies the weights at load into private memory advised for 2 MiB
	// pages: faster decode (fewer page walks while streaming weights), a private copy per process.
	WeightMemoryHugePages WeightMemory = 2
	// WeightMemoryDevice is reported by RuntimeInfo only: the weights are in device memory.
	WeightMemoryDevice WeightMemory = 3
)

// KVScaleSource says where an FP8 KV cache takes its scales from (LLM_KV_SCALE_*).
type KVScaleSource int32

const (
	KVScaleNone       KVScaleSource = 0
	KVScaleCheckpoint KVScaleSource = 1
	KVScaleCalibrated KVScaleSource = 2
	KVScalePerTile    KVScaleSource = 3
)

// SessionState is a session's place in its life cycle (LLM_SESSION_*).
type SessionState int32

const (
	SessionIdle      SessionState = 0 // nothing queued, nothing generating
	SessionPrefill   SessionState = 1 // prompt tokens queued
	SessionDecoding  SessionState = 2 // generating
	SessionFinished  SessionState = 3 // the generation ended; the session may take a new turn
	SessionCancelled SessionState = 4
	SessionFailed    SessionState = 5
)

// FinishReason says why a generation ended (LLM_FINISH_*).
type FinishReason int32

const (
	FinishNone      FinishReason = 0 // still running
	FinishStop      FinishReason = 1 // sampled a stop token (the token is reported)
	FinishLength    FinishReason = 2 // max new tokens reached or the context is full
	FinishCancelled FinishReason = 3
	FinishError     FinishReason = 4 // see the result's status
)

func (f FinishReason) String() string {
	switch f {
	case FinishNone:
		return "none"
	case FinishStop:
		return "stop"
	case FinishLength:
		return "length"
	case FinishCancelled:
		return "cancelled"
	case FinishError:
		return "error"
	}
	return "FinishReason(" + strconv.Itoa(int(f)) + ")"
}

// TokenNone marks a step result without a sampled token (prefill still running, an error).
const TokenNone int32 = -1

// TokenizerFamily is the tokenizer format of a model directory (LLM_TOKENIZER_*).
type TokenizerFamily int32

const (
	TokenizerKimi TokenizerFamily = 1 // tiktoken.model
	TokenizerGLM  TokenizerFamily = 2 // tokenizer.json
)

// LogLevel is the level of a library log line (LLM_LOG_*).
type LogLevel int32

const (
	LogDebug   LogLevel = 0
	LogInfo    LogLevel = 1
	LogWarning LogLevel = 2
	LogError   LogLevel = 3
	LogOff     LogLevel = 4
)

// errorMessageCapacity is LLM_ERROR_MESSAGE_CAPACITY: llm_error's message buffer.
const errorMessageCapacity = 1024

// cstring copies s into C memory for a call that takes a NUL-terminated string; the caller
// frees it. A NUL inside s would silently cut the string the library sees (another directory,
// another message), so it is refused.
func cstring(op, what, s string) (*C.char, error) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return nil, &Error{Op: op, Status: StatusInvalidArgument,
			Message: what + " contains a NUL byte at offset " + strconv.Itoa(i)}
	}
	return C.CString(s), nil
}
