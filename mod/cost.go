package mod

import "github.com/modrun/modrun/gguf"

// What one token costs, for the ideal MoD speedup that `modrun bench` reports
// against a dense twin (DESIGN.md §6): decode is bound by the weight bytes it
// reads, prefill by its arithmetic. A routed block costs its share: the
// fraction of tokens it processes. Its router (and its predictor, when
// routing by it) runs for every token.

// WeightBytesPerToken is the weight bytes one decode token reads, as stored
// (quantized matrices at their packed size): one row of the token
// embedding, every dense block whole, each routed block l times
// routedFrac[l] plus its router always (and its predictor with
// RoutingPredictor), the output norm and the output matrix. routedFrac is
// indexed by layer ([NLayer], like State.Selected[l] / State.Seen[l]);
// entries of dense layers are ignored; nil counts every block whole. The KV
// cache is not counted.
func (m *Model) WeightBytesPerToken(r Routing, routedFrac []float64) float64 {
	w := m.Weights
	total := matBytes(&w.TokenEmbd)/float64(w.TokenEmbd.Rows) + matBytes(&w.OutputNorm) + matBytes(&w.Output)
	for l := range w.Blocks {
		b := &w.Blocks[l]
		block := 0.0
		for _, mt := range []*Mat{&b.AttnNorm, &b.Q, &b.K, &b.V, &b.O, &b.FFNNorm, &b.Gate, &b.Up, &b.Down} {
			block += matBytes(mt)
		}
		if b.Router == nil {
			total += block
			continue
		}
		total += routedShare(routedFrac, l)*block + matBytes(&b.Router.Weight) + matBytes(&b.Router.Bias)
		if r == RoutingPredictor && b.Router.PredUp != nil {
			total += matBytes(b.Router.PredUp) + matBytes(b.Router.PredDown)
		}
	}
	return total
}

// FLOPsPerToken is the arithmetic of one token in prefill, 2 per
// multiply-add of the matrix products and of attention, the token at
// position ctx (it attends to ctx+1 keys in a dense block): every dense
// block whole; each routed block l times routedFrac[l], its attention over
// the routedFrac[l] share of the keys it keeps (a compact cache), plus its
// router always (and its predictor with RoutingPredictor); the output
// matrix. Norms and element-wise ops, a few per element, are left out.
// routedFrac is as in WeightBytesPerToken.
func (m *Model) FLOPsPerToken(r Routing, routedFrac []float64, ctx int) float64 {
	c := m.Config
	w := m.Weights
	qd := float64(c.NHead * c.HeadDim)
	attention := func(keys float64) float64 { return 2 * 2 * qd * keys } // q·k and the weighted sum of v
	total := matFLOPs(&w.Output)
	for l := range w.Blocks {
		b := &w.Blocks[l]
		block := 0.0
		for _, mt := range []*Mat{&b.Q, &b.K, &b.V, &b.O, &b.Gate, &b.Up, &b.Down} {
			block += matFLOPs(mt)
		}
		if b.Router == nil {
			total += block + attention(float64(ctx+1))
			continue
		}
		f := routedShare(routedFrac, l)
		total += f*(block+attention(f*float64(ctx)+1)) + matFLOPs(&b.Router.Weight)
		if r == RoutingPredictor && b.Router.PredUp != nil {
			total += matFLOPs(b.Router.PredUp) + matFLOPs(b.Router.PredDown)
		}
	}
	return total
}

// routedShare is routedFrac[l], or 1 without fractions.
func routedShare(routedFrac []float64, l int) float64 {
	if routedFrac == nil {
		return 1
	}
	return routedFrac[l]
}

// matBytes is m's size as stored; 0 for an absent optional tensor.
func matBytes(m *Mat) float64 {
	if m == nil || m.Name == "" {
		return 0
	}
	n, err := gguf.TensorBytes(m.Type, []uint64{uint64(m.Cols), uint64(m.Rows)})
	if err != nil {
		panic("mod: " + m.Name + ": " + err.Error()) // a loaded Mat always has a valid shape
	}
	return float64(n)
}

// matFLOPs is 2 per weight: one multiply-add per weight and token.
func matFLOPs(m *Mat) float64 {
	if m == nil || m.Name == "" {
		return 0
	}
	return 2 * float64(m.Rows) * float64(m.Cols)
}
