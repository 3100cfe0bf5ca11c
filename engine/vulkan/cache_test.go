package vulkan

import (
	"math"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// Test-only reads of a Runner's state.

// Cache reads layer l's KV cache back, as mod.State.KV returns it: keys and
// values [entries][kvDim] and each entry's original position.
func (r *Runner) Cache(l int) (k, v []float32, pos []int32, err error) {
	counts, err := r.CacheEntries()
	if err != nil {
		return nil, nil, nil, err
	}
	n := counts[l]
	if n == 0 {
		return nil, nil, nil, nil
	}
	kvd := r.c.KVDim()
	lc := r.cache[l]
	if k, err = r.downloadKV(lc.k, n*kvd); err != nil {
		return nil, nil, nil, err
	}
	if v, err = r.downloadKV(lc.v, n*kvd); err != nil {
		return nil, nil, nil, err
	}
	p, err := downloadF32(lc.pos, n)
	if err != nil {
		return nil, nil, nil, err
	}
	pos = make([]int32, n)
	for i, f := range p {
		pos[i] = int32(math.Float32bits(f))
	}
	return k, v, pos, nil
}

// downloadKV reads n cache elements of b, decoded to float32.
func (r *Runner) downloadKV(b *vk.Buffer, n int) ([]float32, error) {
	if r.kv == shaders.KVF32 {
		return downloadF32(b, n)
	}
	raw := make([]byte, 2*n)
	if err := b.Download(raw, 0); err != nil {
		return nil, err
	}
	x := make([]float32, n)
	if err := gguf.Dequantize(gguf.TypeF16, raw, x); err != nil {
		return nil, err
	}
	return x, nil
}
