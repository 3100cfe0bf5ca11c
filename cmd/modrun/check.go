package main

import (
	"fmt"
	"io"

	"github.com/modrun/modrun/gguf"
)

// checkReport is the --json form of --check.
type checkReport struct {
	NonFinite []nonFinite `json:"nonfinite"` // empty when every value is finite
}

// nonFinite is one tensor that holds NaN or infinite values, as
// `inspect --check` reports it.
type nonFinite struct {
	Tensor string `json:"tensor"`
	Count  uint64 `json:"count"` // non-finite elements, dequantized
	First  uint64 `json:"first"` // the first one's element index
	Value  any    `json:"value"` // the first one: "NaN", "+Inf" or "-Inf"
}

// checkChunk is how many elements check dequantizes at a time: a tensor of
// a 7B model needs no more memory than this.
const checkChunk = 1 << 20

// checkFinite dequantizes every tensor of f, a chunk at a time, and
// returns those that hold a NaN or an infinity, in file order.
func checkFinite(f *gguf.File) ([]nonFinite, error) {
	out := []nonFinite{}
	buf := make([]float32, checkChunk)
	for _, t := range f.Tensors {
		data, err := f.TensorData(t.Name)
		if err != nil {
			return nil, err
		}
		block, blockBytes := uint64(t.Type.BlockSize()), uint64(t.Type.BlockBytes())
		if block == 0 {
			return nil, fmt.Errorf("%s: tensor %q: unknown type %s", f.Path, t.Name, t.Type)
		}
		step := checkChunk / block * block // whole blocks
		bad := nonFinite{Tensor: t.Name}
		for lo := uint64(0); lo < t.Elements(); lo += step {
			n := min(step, t.Elements()-lo)
			dst := buf[:n]
			if err := gguf.Dequantize(t.Type, data[lo/block*blockBytes:(lo+n)/block*blockBytes], dst); err != nil {
				return nil, fmt.Errorf("%s: tensor %q: %w", f.Path, t.Name, err)
			}
			for i, v := range dst {
				if v-v == 0 { // finite
					continue
				}
				if bad.Count == 0 {
					bad.First, bad.Value = lo+uint64(i), finite(v)
				}
				bad.Count++
			}
		}
		if bad.Count > 0 {
			out = append(out, bad)
		}
	}
	return out, nil
}

// writeCheck prints checkFinite's findings; an error when there are any,
// so the exit status says it too.
func writeCheck(w io.Writer, f *gguf.File, bad []nonFinite) error {
	if len(bad) == 0 {
		_, err := fmt.Fprintf(w, "\ncheck: every value of the %d tensors is finite\n", len(f.Tensors))
		return err
	}
	fmt.Fprintf(w, "\ncheck: %d of %d tensors hold NaN or infinite values:\n", len(bad), len(f.Tensors))
	for _, b := range bad {
		fmt.Fprintf(w, "  %s: %d non-finite of %d, the first at element %d (%v)\n", b.Tensor, b.Count, elements(f, b.Tensor), b.First, b.Value)
	}
	return checkError(f, bad)
}

func checkError(f *gguf.File, bad []nonFinite) error {
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %d tensors hold NaN or infinite values, the first %s (element %d: %v)",
		f.Path, len(bad), bad[0].Tensor, bad[0].First, bad[0].Value)
}

func elements(f *gguf.File, name string) uint64 {
	t, _ := f.Tensor(name)
	return t.Elements()
}
