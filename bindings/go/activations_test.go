package llmrt

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The INT8 activation policy reaches the library: an unknown value is refused naming the field,
// and INT8 over INT4 experts decodes the golden prompt's full length.
func TestQuantizedActivationsOption(t *testing.T) {
	if _, err := NewRuntime(tinyModel, &RuntimeOptions{QuantizedActivations: 7}); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "quantized_activations") {
		t.Fatalf("QuantizedActivations 7: %v", err)
	}
	r := openRuntime(t, tinyModel, &RuntimeOptions{KVDType: KVDTypeF32, PrefillWeights: WeightsINT4G32,
		DecodeWeights: WeightsINT4G32, QuantizedActivations: ActivationsINT8})
	defer r.Close()
	s, err := r.NewSession(&SamplingOptions{MaxNewTokens: uint32(len(goldenTokens))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Append(goldenPrompt); err != nil {
		t.Fatal(err)
	}
	n := 0
	for n < len(goldenTokens) {
		res, err := s.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Err(); err != nil {
			t.Fatalf("step: %v", err)
		}
		if res.Token != TokenNone {
			n++
		}
		if res.Finish != FinishNone {
			break
		}
	}
	if n != len(goldenTokens) {
		t.Fatalf("%d tokens, want %d", n, len(goldenTokens))
	}
}
