package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/synth"
)

// The kernels, one row of 768 (stories15m's nFF) per call; bytes/s counts
// the weight bytes read.
func BenchmarkKernels(b *testing.B) {
	const n = 768
	g := rand.New(rand.NewPCG(1, 2))
	w, x := randInt8(g, n), randInt8(g, n)
	wd, xd := randF32(g, n/blockLen), randF32(g, n/blockLen)
	q4 := make([]byte, n/2)
	f, h := randF32(g, n), make([]uint16, n)
	w4, wd4 := randInt8(g, 4*n), randF32(g, 4*n/blockLen)
	q44 := make([]byte, 4*n/2)
	var four [4]float32
	kernels := []struct {
		name  string
		bytes int
		run   func() float32
	}{
		{"q8_0", n + 4*n/blockLen, func() float32 { return dotQ8(w, x, wd, xd) }},
		{"q8_0x4", 4 * (n + 4*n/blockLen), func() float32 { dotQ8x4(w4, wd4, x, xd, n, &four); return four[0] }},
		{"q4_0", n/2 + 4*n/blockLen, func() float32 { return dotQ4(q4, x, wd, xd) }},
		{"q4_0x4", 4 * (n/2 + 4*n/blockLen), func() float32 { dotQ4x4(q44, wd4, x, xd, n, &four); return four[0] }},
		{"f32", 4 * n, func() float32 { return dotF32(f, f) }},
		{"f16", 2 * n, func() float32 { return dotF16(h, f) }},
	}
	savedSIMD, savedVNNI := useSIMD, useVNNI
	defer func() { useSIMD, useVNNI = savedSIMD, savedVNNI }()
	for _, path := range [][2]bool{{true, true}, {true, false}, {false, false}} {
		if path[0] && simdName == "" || path[1] && !hasVNNI {
			continue
		}
		useSIMD, useVNNI = path[0], path[1]
		for _, k := range kernels {
			b.Run(fmt.Sprintf("%s/%s", k.name, Kernels()), func(b *testing.B) {
				b.SetBytes(int64(k.bytes))
				var sink float32
				for i := 0; i < b.N; i++ {
					sink += k.run()
				}
				_ = sink
			})
		}
	}
}

// stories15m decode and a 256-token prompt, per weight type: llama-bench's
// tg64 and pp256.
func BenchmarkStories15m(b *testing.B) {
	s, err := synth.ParseShape("stories15m")
	if err != nil {
		b.Fatal(err)
	}
	for _, typ := range []gguf.TensorType{gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeF16} {
		m, err := synth.Build(s, synth.Options{Type: typ, Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		run, err := New(m.Model, mod.RoutingRouter, Options{})
		if err != nil {
			b.Fatal(err)
		}
		prompt := make([]int32, 256)
		for i := range prompt {
			prompt[i] = int32(3 + i*7%31000)
		}
		b.Run(fmt.Sprintf("%s/decode", typ), func(b *testing.B) {
			run.Reset()
			for i := 0; i < b.N; i++ {
				if run.Pos() >= 64 { // llama-bench's tg64: contexts 0 to 64
					run.Reset()
				}
				if _, err := run.FeedArgmax(prompt[5:6]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("%s/prompt256", typ), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				run.Reset()
				if _, err := run.Feed(prompt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(prompt))/b.Elapsed().Seconds(), "tok/s")
		})
		m.Close()
	}
}

// The attention kernels over one head of stories15m's shape (headDim 48,
// keys 1152 bytes apart, as a row of 6 heads) and a 64-key context, the
// keys in cache: scores, then the values mixed.
func BenchmarkAttentionKernels(b *testing.B) {
	const hd, kvd, m = 48, 288, 64
	g := rand.New(rand.NewPCG(3, 4))
	q, k, p := randF32(g, hd), randF32(g, m*kvd), randF32(g, m)
	sc, out := make([]float32, m), make([]float32, hd)
	b.Run("scores", func(b *testing.B) {
		for range b.N {
			scores(sc, q, k, kvd, hd, 0.5)
		}
	})
	b.Run("mix", func(b *testing.B) {
		for range b.N {
			mix(out, k, kvd, p)
		}
	})
}
