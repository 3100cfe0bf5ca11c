package bench

import (
	"github.com/modrun/modrun/mod"
)

// DecodeTraffic is what one decode token must read from memory at the
// least: each weight it uses once (mod.Model.WeightBytesPerToken), and the
// keys and values it attends to. Effective bandwidth is these bytes times
// tokens/s; a MoD model's ideal decode speedup over its dense twin is the
// ratio of their bytes.
type DecodeTraffic struct {
	WeightBytes float64 `json:"weight_bytes"`
	KVBytes     float64 `json:"kv_bytes"`
}

// Total is all the bytes.
func (t DecodeTraffic) Total() float64 { return t.WeightBytes + t.KVBytes }

// DecodeTrafficOf counts the bytes one decode token of m reads with the
// given routing at a mean context of ctx tokens, with KV entries of
// kvElemBytes per element. routed[l] is the fraction of tokens routed layer
// l took ([NLayer]; nil: every block takes every token): its weights are
// read by that fraction of the tokens, and its compact cache holds that
// fraction of the context, so its KV reads scale by the fraction squared.
func DecodeTrafficOf(m *mod.Model, routing mod.Routing, routed []float64, ctx float64, kvElemBytes int) DecodeTraffic {
	c := m.Config
	t := DecodeTraffic{WeightBytes: m.WeightBytesPerToken(routing, routed)}
	perEntry := float64(2 * c.KVDim() * kvElemBytes) // a key and a value
	for l := 0; l < c.NLayer; l++ {
		f := 1.0
		if c.Routed[l] && routed != nil {
			f = routed[l] * routed[l] // attends with that chance, over that share of the context
		}
		t.KVBytes += f * ctx * perEntry
	}
	return t
}
