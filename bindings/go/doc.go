// Package llmrt is the Go binding of llmrt, an embeddable inference runtime for the Kimi K2.x and
// GLM MoE model families. It wraps the library's C ABI (include/llmrt/llmrt.h) through cgo and
// finds the library with pkg-config (llmrt.pc).
//
// A Runtime loads a Hugging Face checkpoint directory and owns its Sessions; a Tokenizer and its
// Detokenizers turn text into token ids and back. Every handle has a Close method that releases it
// exactly once (later calls are no-ops) and waits for the calls in progress on it; calls after
// Close return an error that matches ErrClosed. There are no finalizers: close what you open.
//
// Threads and goroutines: every method may be called from any goroutine. One llm_decode_step
// advances every session of a runtime at once, so the Runtime keeps a queue of step results per
// session: a goroutine that needs its session's next result and finds the queue empty runs one
// step and files every result of it under its session. Many sessions streamed from many
// goroutines are therefore batched by the runtime, and no goroutine loses another's tokens.
// Hosts that drive the loop themselves call Runtime.Step.
//
// Errors are values: every failure is an *Error carrying the llm_status (Status) and the
// library's message, read through the per-handle error functions of the C ABI, which do not
// depend on the OS thread a goroutine happens to run on. errors.Is(err, ErrNotFound) and friends
// test the kind.
package llmrt
