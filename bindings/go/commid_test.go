package llmrt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// Group ids (NewCommID, llm_comm_id_create) and the runtime option that carries one. No MPI
// process is started: every runtime case here fails, or ignores the id, before ranks would meet.

// twoRanks is rank 0 of a two-process group on the tiny model's options.
func twoRanks(id *CommID) *RuntimeOptions {
	return &RuntimeOptions{KVDType: KVDTypeF32, WorldSize: 2, Rank: 0, CollectiveTimeoutMs: 2000, CommID: id}
}

func TestCommIDsAreDistinctAndRoundTrip(t *testing.T) {
	a, err := NewCommID(BackendCPU)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewCommID(BackendCPU)
	if err != nil {
		t.Fatal(err)
	}
	if a.Backend() != BackendCPU {
		t.Errorf("backend %d, want CPU", a.Backend())
	}
	if a == b || a.IDBytes() == b.IDBytes() {
		t.Errorf("two ids of different groups are equal: %x", a.IDBytes())
	}
	if a.IDBytes() == [commIDBytes]byte{} {
		t.Error("the id bytes are all zero")
	}

	// The serialized form is the C struct: backend, reserved 0, then the 128 id bytes.
	raw := a.Bytes()
	if len(raw) != 136 || CommIDSize != 136 {
		t.Fatalf("serialized %d bytes, CommIDSize %d; want 136", len(raw), CommIDSize)
	}
	var backend [4]byte
	binary.LittleEndian.PutUint32(backend[:], uint32(BackendCPU)) // the hosts llmrt builds for
	id := a.IDBytes()
	if !bytes.Equal(raw[:4], backend[:]) || !bytes.Equal(raw[4:8], make([]byte, 4)) || !bytes.Equal(raw[8:], id[:]) {
		t.Errorf("serialized form % x", raw[:16])
	}
	back, err := CommIDFromBytes(raw)
	if err != nil || back != a || !bytes.Equal(back.Bytes(), raw) {
		t.Errorf("CommIDFromBytes(Bytes()) = %x, %v", back.Bytes()[:16], err)
	}
	var un CommID
	m, _ := a.MarshalBinary()
	if err := un.UnmarshalBinary(m); err != nil || un != a {
		t.Errorf("UnmarshalBinary(MarshalBinary()): %v", err)
	}
}

func TestMalformedSerializedCommIDs(t *testing.T) {
	a, err := NewCommID(BackendCPU)
	if err != nil {
		t.Fatal(err)
	}
	raw := a.Bytes()
	for _, n := range []int{0, 128, 135, 137} {
		b := append(append([]byte{}, raw...), 0)[:n]
		_, err := CommIDFromBytes(b)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "136") ||
			!strings.Contains(err.Error(), strconv.Itoa(n)) {
			t.Errorf("%d bytes: %v", n, err)
		}
	}
	b := append([]byte{}, raw...)
	b[0] = 0 // BackendAuto
	if _, err := CommIDFromBytes(b); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "backend is 0") {
		t.Errorf("backend 0: %v", err)
	}
	b = append([]byte{}, raw...)
	b[4] = 1
	var un CommID
	if err := un.UnmarshalBinary(b); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("reserved 1: %v", err)
	}
}

func TestCommIDBadBackend(t *testing.T) {
	for _, b := range []Backend{BackendAuto, 77, -1} {
		id, err := NewCommID(b)
		var e *Error
		if !errors.As(err, &e) || e.Status != StatusInvalidArgument || e.Op != "llm_comm_id_create" ||
			!strings.Contains(e.Message, "backend") {
			t.Errorf("NewCommID(%d) = %v; want LLM_ERR_INVALID_ARGUMENT naming the backend", b, err)
		}
		if id != (CommID{}) {
			t.Errorf("NewCommID(%d) returned an id with its error", b)
		}
	}
	// NULL, which the Go API cannot pass: the raw call.
	if st := commIDCreateNull(); st != StatusInvalidArgument {
		t.Errorf("llm_comm_id_create(CPU, NULL) = %v", st)
	}
}

func TestCUDACommIDIsRefusedByMultiProcessRanks(t *testing.T) {
	// NCCL's unique id where libnccl.so.2 loads (it needs no GPU); elsewhere Unsupported naming
	// NCCL, and the runtime's refusal is checked with a CUDA-kind id made from bytes.
	id, err := NewCommID(BackendCUDA)
	if err != nil {
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "NCCL") {
			t.Fatalf("NewCommID(CUDA): %v; want an id or LLM_ERR_UNSUPPORTED naming NCCL", err)
		}
		raw := make([]byte, CommIDSize)
		raw[0] = byte(BackendCUDA)
		if id, err = CommIDFromBytes(raw); err != nil {
			t.Fatal(err)
		}
	} else if id.Backend() != BackendCUDA {
		t.Errorf("backend %d, want CUDA", id.Backend())
	}
	r, err := NewRuntime(tinyModel, twoRanks(&id))
	if r != nil || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "comm_id was made for CUDA ranks") {
		t.Errorf("a CUDA id with WorldSize 2: %v, %v; want LLM_ERR_UNSUPPORTED", r, err)
	}
}

func TestForgedCPUCommIDIsRefusedBeforeJoining(t *testing.T) {
	a, err := NewCommID(BackendCPU)
	if err != nil {
		t.Fatal(err)
	}
	raw := a.Bytes()
	raw[8] ^= 1 // the first id byte
	forged, err := CommIDFromBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRuntime(tinyModel, twoRanks(&forged))
	if r != nil || !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "not a CPU (MPI) group id") {
		t.Errorf("a forged id with WorldSize 2: %v, %v; want LLM_ERR_INVALID_ARGUMENT", r, err)
	}
	// The zero CommID has no backend; the library names the field.
	var zero CommID
	r, err = NewRuntime(tinyModel, twoRanks(&zero))
	if r != nil || !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "comm_id->backend") {
		t.Errorf("the zero CommID with WorldSize 2: %v, %v; want LLM_ERR_INVALID_ARGUMENT", r, err)
	}
}

func TestOneProcessIgnoresTheCommID(t *testing.T) {
	a, err := NewCommID(BackendCPU)
	if err != nil {
		t.Fatal(err)
	}
	raw := a.Bytes()
	raw[8] ^= 1
	forged, err := CommIDFromBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	rt := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32, TensorParallel: 2, CommID: &forged})
	s, err := rt.NewSession(&SamplingOptions{MaxNewTokens: uint32(len(goldenTokens))})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(goldenPrompt); err != nil {
		t.Fatal(err)
	}
	if ids, _ := streamIDs(t, s); !equalIDs(ids, goldenTokens) {
		t.Errorf("tokens %v, want %v", ids, goldenTokens)
	}
}
