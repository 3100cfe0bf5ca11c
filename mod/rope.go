package mod

import (
	"fmt"
	"math"
)

// RoPE's frequencies. Every place that rotates (mod's forward pass, and on
// the GPU the rope kernel, the fused decode attention and the batched
// graph, through shaders.RopeFreqs) reads one table per model, made here
// once: the angle of pair i at position pos is pos * freqs[i]. A new
// scaling rule changes RopeFrequencies and nothing else.

// Values of rope.scaling.type, as llama.cpp names them.
const (
	RopeScalingNone   = "none"
	RopeScalingLinear = "linear"
)

// RopeFrequencies is the angle per position, in radians, of each pair
// (2i, 2i+1) of a head: [headDim/2]. llama.cpp's rule for a llama model
// (ggml's rope with no YaRN mix):
//
//	freqs[i] = base^(-2i/headDim) / factors[i] / scale
//
// base is rope.freq_base, factors the Llama 3.1 frequency factors of the
// rope_freqs.weight tensor (nil: all 1), and scale c.RopeScale, the linear
// scaling factor (rope.scaling.factor; 0 and 1 mean none). Computed in
// float64, so the CPU's angles are as exact as its sin and cos.
func RopeFrequencies(c Config, factors []float32) []float64 {
	scale := float64(c.RopeScale)
	if scale == 0 {
		scale = 1
	}
	freqs := make([]float64, c.HeadDim/2)
	for i := range freqs {
		f := math.Pow(float64(c.RopeBase), -float64(2*i)/float64(c.HeadDim)) / scale
		if factors != nil {
			f /= float64(factors[i])
		}
		freqs[i] = f
	}
	return freqs
}

// RoPE rotates each head's interleaved pairs (2i, 2i+1) by pos*freqs[i]
// (RopeFrequencies), Meta's Llama convention (GGUF "norm" RoPE): v is
// [heads][2*len(freqs)].
func RoPE(v []float32, pos int32, freqs []float64) {
	hd := 2 * len(freqs)
	for i, f := range freqs {
		theta := float64(pos) * f
		cos, sin := float32(math.Cos(theta)), float32(math.Sin(theta))
		for h := 0; h < len(v); h += hd {
			a, b := v[h+2*i], v[h+2*i+1]
			v[h+2*i], v[h+2*i+1] = a*cos-b*sin, a*sin+b*cos
		}
	}
}

// Llama3RopeFactors are the frequency factors of Llama 3.1 and 3.2's
// "llama3" rope scaling, the rope_freqs.weight that llama.cpp's converter
// writes from a Hugging Face config's rope_scaling: with
// wavelength = 2 pi / base^(-2i/headDim), pairs whose wavelength is under
// origContext/highFreqFactor keep their frequency (factor 1), those over
// origContext/lowFreqFactor are slowed by factor, and those between get
// 1 / ((1-s)/factor + s) with s = (origContext/wavelength -
// lowFreqFactor) / (highFreqFactor - lowFreqFactor), a smooth blend.
// Llama 3.2: factor 32, lowFreqFactor 1, highFreqFactor 4, origContext 8192.
func Llama3RopeFactors(headDim int, base, factor, lowFreqFactor, highFreqFactor float64, origContext int) ([]float32, error) {
	if !(factor >= 1) || !(lowFreqFactor > 0) || !(highFreqFactor > lowFreqFactor) || origContext <= 0 || headDim <= 0 || headDim%2 != 0 || !(base > 1) {
		return nil, fmt.Errorf("mod: llama3 rope scaling: factor %g (>= 1), low_freq_factor %g < high_freq_factor %g (> 0), original context %d (> 0), head dimension %d (even), base %g (> 1)",
			factor, lowFreqFactor, highFreqFactor, origContext, headDim, base)
	}
	ctx := float64(origContext)
	lowWave, highWave := ctx/lowFreqFactor, ctx/highFreqFactor // long waves are low frequencies
	out := make([]float32, headDim/2)
	for i := range out {
		wave := 2 * math.Pi / math.Pow(base, -float64(2*i)/float64(headDim))
		switch {
		case wave < highWave:
			out[i] = 1
		case wave > lowWave:
			out[i] = float32(factor)
		default:
			s := (ctx/wave - lowFreqFactor) / (highFreqFactor - lowFreqFactor)
			out[i] = float32(1 / ((1-s)/factor + s))
		}
	}
	return out, nil
}
