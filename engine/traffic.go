package engine

import (
	"strconv"
	"strings"

	"github.com/modrun/modrun/mod"
)

// DecodeTraffic is what one decode token must read from memory at the
// least: each weight it uses once, and the keys and values it attends to.
// Effective bandwidth is these bytes times tokens/s; a MoD model's ideal
// decode speedup over its dense twin is the ratio of their bytes.
type DecodeTraffic struct {
	WeightBytes float64
	KVBytes     float64
}

// Total is all the bytes.
func (t DecodeTraffic) Total() float64 { return t.WeightBytes + t.KVBytes }

// DecodeTrafficOf counts the bytes one decode token of m reads with the
// given routing at a mean context of ctx tokens, with KV entries of
// kvElemBytes per element. routed[l] is the fraction of tokens routed
// layer l took (a routed layer's weights are read by that fraction of the
// tokens, and its compact cache holds that fraction of the context); dense
// layers take every token. The router is read by every token (its score
// scales the block's output too); the predictor only with predictor routing.
// Of the embedding, one row.
func DecodeTrafficOf(m *mod.Model, routing mod.Routing, routed map[int]float64, ctx float64, kvElemBytes int) DecodeTraffic {
	c := m.Config
	var t DecodeTraffic
	for _, ti := range m.File.Tensors {
		size := float64(ti.Size)
		layer, name, inBlock := blockTensor(ti.Name)
		switch {
		case ti.Name == mod.TensorTokenEmbd:
			size /= float64(c.NVocab)
		case !inBlock:
		case name == mod.TensorRouterWeight || name == mod.TensorRouterBias:
		case name == mod.TensorPredUp || name == mod.TensorPredDown:
			if routing != mod.RoutingPredictor {
				size = 0
			}
		case layer < len(c.Routed) && c.Routed[layer]:
			size *= routed[layer]
		}
		t.WeightBytes += size
	}
	perEntry := float64(2 * c.KVDim() * kvElemBytes) // a key and a value
	for l := 0; l < c.NLayer; l++ {
		f := 1.0
		if c.Routed[l] {
			f = routed[l] * routed[l] // attends with that chance, over that share of the context
		}
		t.KVBytes += f * ctx * perEntry
	}
	return t
}

// blockTensor splits "blk.3.attn_q.weight" into 3 and "attn_q.weight".
func blockTensor(name string) (layer int, rest string, ok bool) {
	s, found := strings.CutPrefix(name, "blk.")
	if !found {
		return 0, "", false
	}
	num, rest, found := strings.Cut(s, ".")
	layer, err := strconv.Atoi(num)
	if !found || err != nil {
		return 0, "", false
	}
	return layer, rest, true
}
