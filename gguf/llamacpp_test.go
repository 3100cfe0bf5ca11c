package gguf

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/shared"
)

// llamaCppDequant is one tensor of a kq-T.dequant.json file: llama.cpp's own
// reference dequantization (gguf-py) of a tensor that llama-quantize wrote.
type llamaCppDequant struct {
	Type  string    `json:"type"`
	Shape []uint64  `json:"shape"`
	First []float64 `json:"first"` // the first 256 values (float32, printed exactly)
	Sum   float64   `json:"sum"`   // float64 sums over the whole tensor
	SumSq float64   `json:"sumsq"`
}

// TestDequantizeMatchesLlamaCpp checks every quantized tensor of the files
// llama.cpp quantized against its own dequantization: the first 256 values
// bit for bit (sign of zero included), and the sums to float64 rounding.
func TestDequantizeMatchesLlamaCpp(t *testing.T) {
	dir := filepath.Dir(shared.Path(t, "quant/kq-f32.gguf"))
	jsons, err := filepath.Glob(filepath.Join(dir, "kq-*.dequant.json"))
	require.NoError(t, err)
	require.NotEmpty(t, jsons)
	seen := map[string]bool{}
	for _, js := range jsons {
		name := strings.TrimSuffix(filepath.Base(js), ".dequant.json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(js)
			require.NoError(t, err)
			var want struct {
				Tensors map[string]llamaCppDequant `json:"tensors"`
			}
			require.NoError(t, json.Unmarshal(raw, &want))
			f, err := Open(filepath.Join(dir, name+".gguf"))
			require.NoError(t, err)
			defer f.Close()
			names := make([]string, 0, len(want.Tensors))
			for n := range want.Tensors {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, tn := range names {
				w := want.Tensors[tn]
				info, ok := f.Tensor(tn)
				require.True(t, ok, "tensor %s", tn)
				require.Equal(t, w.Type, info.Type.String(), "tensor %s", tn)
				require.Equal(t, w.Shape, info.Dims, "tensor %s", tn)
				seen[w.Type] = true
				data, err := f.TensorData(tn)
				require.NoError(t, err)
				got := make([]float32, info.Elements())
				require.NoError(t, Dequantize(info.Type, data, got), "tensor %s", tn)
				require.Len(t, w.First, 256)
				for i, v := range w.First {
					if math.Float32bits(float32(v)) != math.Float32bits(got[i]) {
						t.Errorf("%s (%s) element %d: got %g (0x%08x), llama.cpp %g (0x%08x)", tn, w.Type, i,
							got[i], math.Float32bits(got[i]), v, math.Float32bits(float32(v)))
						break
					}
				}
				sum, sumSq, sumAbs := sums(got)
				// numpy's pairwise float64 sum errs by at most ~log2(n) ulps of
				// sum|x|; ours is compensated, so 32 ulps of sum|x| bounds the gap.
				tol := 32 * 0x1p-52 * sumAbs
				assert.InDelta(t, w.Sum, sum, tol, "%s sum", tn)
				assert.InDelta(t, w.SumSq, sumSq, 32*0x1p-52*sumSq, "%s sum of squares", tn)
			}
		})
	}
	for _, typ := range []TensorType{TypeQ4_1, TypeQ5_0, TypeQ5_1, TypeQ2_K, TypeQ3_K, TypeQ4_K, TypeQ5_K, TypeQ6_K} {
		assert.True(t, seen[typ.String()], "no llama.cpp tensor of type %s was checked", typ)
	}
}

// sums returns the float64 sum, sum of squares and sum of magnitudes of x,
// each with Neumaier compensation so the result is (nearly) exactly rounded.
func sums(x []float32) (sum, sumSq, sumAbs float64) {
	var s, sq, c, csq float64
	add := func(acc, comp *float64, v float64) {
		t := *acc + v
		if math.Abs(*acc) >= math.Abs(v) {
			*comp += (*acc - t) + v
		} else {
			*comp += (v - t) + *acc
		}
		*acc = t
	}
	for _, v := range x {
		f := float64(v)
		add(&s, &c, f)
		add(&sq, &csq, f*f)
		sumAbs += math.Abs(f)
	}
	return s + c, sq + csq, sumAbs
}
