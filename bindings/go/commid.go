package llmrt

/*
#include <string.h>
#include "llmrt/llmrt.h"

// llm_comm_id_create has no handle to record its error: the thread-local message is copied here,
// in the same cgo call and therefore on the same OS thread.
static llm_status llmrt_go_comm_id_create(int32_t backend, llm_comm_id* out, char* msg, size_t cap) {
  llm_status st = llm_comm_id_create(backend, out);
  if (st != LLM_OK && cap > 0) {
    strncpy(msg, llm_last_error(), cap - 1);
    msg[cap - 1] = '\0';
  }
  return st;
}
*/
import "C"

import (
	"strconv"
	"unsafe"
)

// CommIDSize is the length of a serialized CommID: the C struct llm_comm_id (the backend as an
// int32, a reserved uint32 that is 0, then the 128 id bytes).
const CommIDSize = int(unsafe.Sizeof(C.llm_comm_id{}))

// commIDBytes is LLM_COMM_ID_BYTES, the opaque part of an id.
const commIDBytes = 128

// CommID is the id of a multi-process group of ranks (llm_comm_id). One process makes it with
// NewCommID, the host hands its Bytes to every process of the group (a file, its own RPC...),
// each rebuilds it with CommIDFromBytes and passes it as RuntimeOptions.CommID. Every rank checks
// it against rank 0's when it joins, so processes given different ids refuse to compute together.
//
// The serialized form is the whole C struct, CommIDSize = 136 bytes, in its memory order (that of
// the host; little-endian on every platform llmrt builds for): byte for byte what a C host writes
// with fwrite(&id, sizeof id, 1, f), and the form the Rust and Python bindings use. The backend
// travels with the id because the library reads the id differently for CPU and CUDA ranks. The
// zero CommID is no id: its backend is BackendAuto, which the library refuses.
type CommID struct {
	raw C.llm_comm_id
}

// NewCommID makes a new group id for ranks on backend: BackendCPU (ranks joined through MPI; a
// random tag) or BackendCUDA (NCCL's unique id; StatusUnsupported where NCCL cannot be loaded;
// make it on the host of rank 0). Another backend is StatusInvalidArgument.
func NewCommID(backend Backend) (CommID, error) {
	var id CommID
	var msg [errorMessageCapacity]C.char
	st := C.llmrt_go_comm_id_create(C.int32_t(backend), &id.raw, &msg[0], C.size_t(len(msg)))
	if st != C.LLM_OK {
		return CommID{}, &Error{Op: "llm_comm_id_create", Status: Status(st), Message: C.GoString(&msg[0])}
	}
	return id, nil
}

// CommIDFromBytes rebuilds an id from its serialized form (another process's Bytes, or a C
// host's struct). A length other than CommIDSize, a backend other than CPU or CUDA, or a reserved
// word other than 0 is StatusInvalidArgument; the library checks the id bytes themselves when a
// runtime is created with the id.
func CommIDFromBytes(b []byte) (CommID, error) {
	var id CommID
	if len(b) != CommIDSize {
		return CommID{}, &Error{Op: "CommIDFromBytes", Status: StatusInvalidArgument,
			Message: "a serialized CommID is " + strconv.Itoa(CommIDSize) + " bytes (backend, reserved, " +
				strconv.Itoa(commIDBytes) + " id bytes), not " + strconv.Itoa(len(b))}
	}
	copy(id.image(), b)
	if b := Backend(id.raw.backend); b != BackendCPU && b != BackendCUDA {
		return CommID{}, &Error{Op: "CommIDFromBytes", Status: StatusInvalidArgument,
			Message: "the serialized CommID's backend is " + strconv.Itoa(int(b)) +
				", not LLM_BACKEND_CPU (1) or LLM_BACKEND_CUDA (2)"}
	}
	if id.raw.reserved != 0 {
		return CommID{}, &Error{Op: "CommIDFromBytes", Status: StatusInvalidArgument,
			Message: "the serialized CommID's reserved word (bytes 4..8) is " +
				strconv.FormatUint(uint64(id.raw.reserved), 10) + ", not 0"}
	}
	return id, nil
}

// image is the struct's memory, for copying in and out.
func (c *CommID) image() []byte {
	return (*[CommIDSize]byte)(unsafe.Pointer(&c.raw))[:]
}

// Bytes returns the id's serialized form (CommIDSize bytes, a new slice).
func (c CommID) Bytes() []byte {
	out := make([]byte, CommIDSize)
	copy(out, c.image())
	return out
}

// MarshalBinary returns Bytes (encoding.BinaryMarshaler).
func (c CommID) MarshalBinary() ([]byte, error) { return c.Bytes(), nil }

// UnmarshalBinary sets c from a serialized form, as CommIDFromBytes checks it
// (encoding.BinaryUnmarshaler).
func (c *CommID) UnmarshalBinary(b []byte) error {
	id, err := CommIDFromBytes(b)
	if err != nil {
		return err
	}
	*c = id
	return nil
}

// Backend is the backend the id was made for (BackendCPU or BackendCUDA; BackendAuto for the
// zero CommID).
func (c CommID) Backend() Backend { return Backend(c.raw.backend) }

// IDBytes returns the 128 opaque bytes (CPU: the MPI group tag; CUDA: NCCL's ncclUniqueId).
func (c CommID) IDBytes() [commIDBytes]byte {
	var out [commIDBytes]byte
	copy(out[:], c.image()[CommIDSize-commIDBytes:])
	return out
}

// commIDCreateNull calls llm_comm_id_create with a NULL id, which the Go API cannot express (for
// the tests).
func commIDCreateNull() Status { return Status(C.llm_comm_id_create(C.LLM_BACKEND_CPU, nil)) }
