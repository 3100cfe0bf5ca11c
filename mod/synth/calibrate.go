package synth

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/tokenizer"
)

// LayerCalibration is what calibration set in one routed layer.
type LayerCalibration struct {
	Layer int
	// RouterBias makes r = w·x + RouterBias > 0 for the top Capacity of
	// the calibration tokens.
	RouterBias float32
	// PredictorBeta makes p = w·x - β c(x) > 0 for the same share.
	PredictorBeta float32
	Tokens        int // calibration tokens the layer saw
}

// calibrationText starts the calibration sequence, as a story starts the
// benchmark's prompt; the greedy cycle continues it, as decoding does.
const calibrationText = "One day, a little boy named Tom went to the park with his mom. He saw a big tree and wanted to climb it. " +
	"His mom said, \"Be careful, Tom!\" Tom climbed up and up, and then he saw a bird in a nest."

// calibrationFLOPs bounds the CPU work of calibration: the longer sequence
// that fits it, from 16 to 128 tokens (16 for a 7B shape, a few seconds).
const calibrationFLOPs = 3e11

// CalibrationTokens is the length of the calibration sequence of shape s.
func CalibrationTokens(s Shape) int {
	n := int(calibrationFLOPs / (2 * float64(s.Params())))
	return min(max(n, 16), 128, s.ContextLen)
}

// calibrate runs the CPU reference with causal router routing over the
// calibration sequence and, at each routed layer before it routes, sets
// the router's bias and the predictor's β from that layer's inputs. One
// pass calibrates every layer: a layer's inputs depend only on the layers
// before it, calibrated by then. The values are written into the model's
// GGUF data as well, so every backend and a saved file see them.
func (m *Model) calibrate(capacity float32, next []int32) error {
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		return fmt.Errorf("synth: %s: %w", m.Name, err)
	}
	n := CalibrationTokens(m.Shape)
	ids, err := tok.Encode(calibrationText, true)
	if err != nil {
		return fmt.Errorf("synth: %s: %w", m.Name, err)
	}
	ids = ids[:min(len(ids), n/2)]
	for len(ids) < n {
		ids = append(ids, next[ids[len(ids)-1]])
	}
	st, err := m.NewState(mod.RoutingRouter)
	if err != nil {
		return err
	}
	st.BeforeRoute = func(l int, x []float32) {
		m.Calibration = append(m.Calibration, calibrateLayer(m.Weights.Blocks[l].Router, l, x, m.Config.NEmbd, capacity))
	}
	if _, err := st.Forward(ids, false); err != nil {
		return fmt.Errorf("synth: %s: calibration: %w", m.Name, err)
	}
	for _, c := range m.Calibration {
		r := m.Weights.Blocks[c.Layer].Router
		if err := m.store(mod.BlockTensor(c.Layer, mod.TensorRouterBias), r.Bias.Vec()); err != nil {
			return err
		}
		if err := m.store(mod.BlockTensor(c.Layer, mod.TensorPredDown), r.PredDown.Vec()); err != nil {
			return err
		}
	}
	return nil
}

// calibrateLayer sets one routed layer's router bias and predictor β so
// that each selects the top share of the tokens x ([n][d]) holds.
func calibrateLayer(r *mod.Router, l int, x []float32, d int, capacity float32) LayerCalibration {
	n := len(x) / d
	h := r.PredUp.Rows
	w, up := r.Weight.Vec(), r.PredUp.Vec() // [d], [h][d]
	z := make([]float64, n)                 // w·x_i
	ratio := make([]float64, n)             // w·x_i / c(x_i)
	for i := range z {
		xi := x[i*d : (i+1)*d]
		z[i] = dot(w, xi)
		var c float64 // c(x_i): mean SiLU of the random hidden units
		for j := 2; j < h; j++ {
			v := dot(up[j*d:(j+1)*d], xi)
			c += v / (1 + math.Exp(-v))
		}
		c /= float64(h - 2)
		ratio[i] = math.Inf(-1)
		if c > 0 {
			ratio[i] = z[i] / c
		}
	}
	k := max(1, int(math.Round(float64(capacity)*float64(n))))
	bias, beta := -threshold(z, k), threshold(ratio, k)
	r.Bias.Vec()[0] = float32(bias)
	down := r.PredDown.Vec()
	for j := 2; j < h; j++ {
		down[j] = float32(-beta / float64(h-2))
	}
	return LayerCalibration{Layer: l, RouterBias: float32(bias), PredictorBeta: float32(beta), Tokens: n}
}

// threshold is a value with exactly k of v above it: midway between the
// k-th and (k+1)-th largest, or below all when k covers every value.
func threshold(v []float64, k int) float64 {
	s := append([]float64(nil), v...)
	sort.Sort(sort.Reverse(sort.Float64Slice(s)))
	if k >= len(s) {
		return s[len(s)-1] - 1
	}
	if math.IsInf(s[k], -1) {
		return s[k-1] - 1
	}
	return (s[k-1] + s[k]) / 2
}

func dot(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

// store writes F32 values into the named tensor of the model's data.
func (m *Model) store(name string, v []float32) error {
	dst, err := m.File.TensorData(name)
	if err != nil {
		return fmt.Errorf("synth: %s: %w", m.Name, err)
	}
	if len(dst) != 4*len(v) {
		return fmt.Errorf("synth: %s: tensor %q holds %d bytes, not %d floats", m.Name, name, len(dst), len(v))
	}
	for i, f := range v {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
	}
	return nil
}
