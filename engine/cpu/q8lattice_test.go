//go:build q8lattice

package cpu

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/tokenizer"
	"github.com/stretchr/testify/require"
)

// TestQ8LatticeNLL is a measurement, not a check, run by hand (see
// bench/results/cpu-quant-nll-vs-llamacpp.md): the ΔNLL of a Q8_0 file
// against its F32 twin, with the activations quantized by quantizeRow and
// by equally fine 8-bit quantizers that differ only in their scale
// (max|x|/L for L in (126, 127], and ggml's F16-rounded scale). How far
// that choice moves the ΔNLL is the size of the noise an engine's own
// ΔNLL carries on this file. It needs MODRUN_Q8_LATTICE="FILE TWIN TEXT"
// and the build tag q8lattice (go test -tags q8lattice), so that the suite
// neither runs nor skips it.
func TestQ8LatticeNLL(t *testing.T) {
	var file, twin, text string
	if _, err := fmt.Sscan(os.Getenv("MODRUN_Q8_LATTICE"), &file, &twin, &text); err != nil {
		t.Skip(`a measurement: MODRUN_Q8_LATTICE="kq-Q8_0.gguf twin-Q8_0.gguf text32k.txt"`)
	}
	raw, err := os.ReadFile(text)
	require.NoError(t, err)
	m, err := mod.Open(file)
	require.NoError(t, err)
	tok, err := tokenizer.FromGGUF(m.File)
	require.NoError(t, err)
	ids, err := tok.Encode(string(raw), false)
	require.NoError(t, err)
	ref := latticeNLL(t, twin, ids, tok.BOS())
	defer func() { quantizeOverride = nil }()
	run := func(name string, q func(q []int8, d []float32, x []float32)) {
		quantizeOverride = q
		got := latticeNLL(t, file, ids, tok.BOS())
		var s, ss float64
		for i := range got {
			dx := got[i] - ref[i]
			s, ss = s+dx, ss+dx*dx
		}
		n := float64(len(got))
		t.Logf("%-32s ΔNLL %+.6f ± %.6f", name, s/n, math.Sqrt((ss/n-s*s/n/n)/n))
	}
	run("quantizeRow (max|x|/127)", nil)
	for k := range 12 {
		l := 127 - float32(k)/12
		run(fmt.Sprintf("max|x|/%.4f", l), func(q []int8, d []float32, x []float32) { quantizeLattice(q, d, x, l, false) })
	}
	run("ggml's (max|x|/127, F16 scale)", func(q []int8, d []float32, x []float32) { quantizeLattice(q, d, x, 127, true) })
}

// quantizeLattice is quantizeRowGo with scale max|x|/l, rounded to F16 if
// f16 (as ggml's block_q8_0 holds it).
func quantizeLattice(q []int8, d []float32, x []float32, l float32, f16 bool) {
	for b := range d {
		xs := x[b*blockLen : (b+1)*blockLen]
		var amax float32
		for _, v := range xs {
			amax = max(amax, v, -v)
		}
		d[b] = amax / l
		qs := q[b*blockLen : (b+1)*blockLen]
		if f16 {
			d[b] = gguf.F16ToF32(gguf.F32ToF16(d[b]))
		}
		var id float32
		if amax > 0 {
			id = l / amax
		}
		for j, v := range xs {
			qs[j] = int8(math.RoundToEven(float64(v * id)))
		}
	}
}

// latticeNLL is each scored token's NLL of path over ids in windows of 256
// (BOS and 255 tokens), as modrun perplexity --ctx 256 scores them.
func latticeNLL(t *testing.T, path string, ids []int32, bos int32) []float64 {
	m, err := mod.Open(path)
	require.NoError(t, err)
	r, err := New(m, mod.RoutingTopK, Options{ContextLen: 256})
	require.NoError(t, err)
	nv := m.Config.NVocab
	var out []float64
	for lo := 0; lo < len(ids); lo += 255 {
		chunk := ids[lo:min(lo+255, len(ids))]
		lg, err := r.Score(append([]int32{bos}, chunk...))
		require.NoError(t, err)
		for i, y := range chunk {
			row := lg[i*nv : (i+1)*nv]
			mx := float64(row[0])
			for _, v := range row {
				mx = math.Max(mx, float64(v))
			}
			var s float64
			for _, v := range row {
				s += math.Exp(float64(v) - mx)
			}
			out = append(out, mx+math.Log(s)-float64(row[y]))
		}
	}
	return out
}
