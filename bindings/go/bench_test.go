package llmrt

import (
	"context"
	"sync"
	"testing"
	"time"
)

// go test -run '^$' -bench . -benchtime 20x: decode throughput of the shipped model through the
// binding, one stream alone and eight streams read from eight goroutines (their steps batched).

func benchStreams(b *testing.B, n int) {
	r, err := NewRuntime(kjvModel, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	const tokens = 128
	b.ResetTimer()
	start := time.Now()
	total := 0
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		counts := make([]int, n)
		for k := 0; k < n; k++ {
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				g, err := r.Generate(context.Background(), concurrentPrompts[k%len(concurrentPrompts)],
					SamplingOptions{MaxNewTokens: tokens})
				if err != nil {
					b.Error(err)
				}
				counts[k] = len(g.Tokens)
			}(k)
		}
		wg.Wait()
		for _, c := range counts {
			total += c
		}
	}
	b.ReportMetric(float64(total)/time.Since(start).Seconds(), "tokens/s")
}

func BenchmarkOneStream(b *testing.B)    { benchStreams(b, 1) }
func BenchmarkEightStreams(b *testing.B) { benchStreams(b, 8) }
