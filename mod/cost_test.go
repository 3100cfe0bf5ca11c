package mod

import (
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/stretchr/testify/assert"
)

// TestWeightBytesPerToken counts the test model's bytes by hand from its
// shapes: matrices in F16 (2 bytes a weight), norms and MoD tensors in F32.
func TestWeightBytesPerToken(t *testing.T) {
	tm := defaultTestModel() // d 48, kvDim 16, nFF 80, nVocab 67, 4 layers, 1 and 3 routed, predictor 24
	tm.weightType = gguf.TypeF16
	m := tm.open(t)
	const d, kvd, ff, vocab, h = 48, 16, 80, 67, 24
	block := 2*d*4 + 2*(d*d+2*d*kvd+d*d+3*d*ff) // two norms, q k v o gate up down
	router := d*4 + 4                           // weight and bias
	pred := h*d*4 + h*4
	fixed := d*2 + d*4 + vocab*d*2 // one embedding row, output norm, output
	dense := float64(fixed + 4*block + 2*router)

	assert.Equal(t, dense, m.WeightBytesPerToken(RoutingRouter, nil), "nil: every block whole")
	assert.Equal(t, dense, m.WeightBytesPerToken(RoutingRouter, []float64{7, 1, 7, 1}), "dense layers' entries are ignored")
	frac := []float64{0, 0.25, 0, 0.5}
	want := float64(fixed) + 2*float64(block) + 0.75*float64(block) + float64(2*router)
	assert.InDelta(t, want, m.WeightBytesPerToken(RoutingRouter, frac), 1e-9)
	assert.InDelta(t, want, m.WeightBytesPerToken(RoutingTopK, frac), 1e-9)
	assert.InDelta(t, want+2*float64(pred), m.WeightBytesPerToken(RoutingPredictor, frac), 1e-9, "the predictor is read for every token")

	twin := tm
	twin.routed = nil
	dm := twin.open(t)
	assert.Equal(t, float64(fixed+4*block), dm.WeightBytesPerToken(RoutingRouter, nil), "the dense twin: no router")
	speedup := dm.WeightBytesPerToken(RoutingRouter, nil) / m.WeightBytesPerToken(RoutingRouter, frac)
	assert.Greater(t, speedup, 1.0)
	t.Logf("ideal decode speedup at fractions %v: %.3f", frac, speedup)

	q8 := defaultTestModel()
	q8.nEmbd, q8.nHead, q8.nKVHead, q8.nFF, q8.predHidden = 64, 4, 2, 96, 32
	q8.weightType = gguf.TypeQ8_0
	qm := q8.open(t)
	const qd, qkvd, qff = 64, 32, 96
	q8Bytes := func(rows, cols int) int { return rows * cols / 32 * 34 }
	qblock := 2*qd*4 + q8Bytes(qd, qd) + 2*q8Bytes(qkvd, qd) + q8Bytes(qd, qd) + 2*q8Bytes(qff, qd) + q8Bytes(qd, qff)
	qfixed := q8Bytes(1, qd) + qd*4 + q8Bytes(vocab, qd)
	assert.Equal(t, float64(qfixed+4*qblock+2*(qd*4+4)), qm.WeightBytesPerToken(RoutingRouter, nil), "Q8_0 at its packed size")
}

// TestFLOPsPerToken: 2 FLOPs a weight and per attended key 4 per query
// element, routed blocks at their share with attention over their share of
// the keys.
func TestFLOPsPerToken(t *testing.T) {
	tm := defaultTestModel()
	m := tm.open(t)
	const d, kvd, ff, vocab, h, qd = 48, 16, 80, 67, 24, 48
	const ctx = 40
	mats := float64(2 * (d*d + 2*d*kvd + d*d + 3*d*ff))
	attn := func(keys float64) float64 { return 4 * qd * keys }
	output := float64(2 * vocab * d)
	router := float64(2 * d)

	all := output + 4*(mats+attn(ctx+1)) + 2*router
	assert.InDelta(t, all, m.FLOPsPerToken(RoutingRouter, nil, ctx), 1e-6)
	frac := []float64{0, 0.25, 0, 0.5}
	want := output + 2*(mats+attn(ctx+1)) + 0.25*(mats+attn(0.25*ctx+1)) + 0.5*(mats+attn(0.5*ctx+1)) + 2*router
	assert.InDelta(t, want, m.FLOPsPerToken(RoutingRouter, frac, ctx), 1e-6)
	assert.InDelta(t, want+2*float64(2*h*d+2*h), m.FLOPsPerToken(RoutingPredictor, frac, ctx), 1e-6)
	assert.Less(t, m.FLOPsPerToken(RoutingRouter, frac, 0), m.FLOPsPerToken(RoutingRouter, frac, ctx), "attention grows with the context")
}
