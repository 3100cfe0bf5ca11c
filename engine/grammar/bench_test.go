package grammar

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkMask times one mask over the whole vocabulary inside a JSON
// string (the widest walk: nearly every token is allowed), fresh (the
// cache cleared each time) and cached (the state seen before).
func BenchmarkMask(b *testing.B) {
	for _, kind := range []string{"spm", "bpe"} {
		_, v := vocabs[kind].get(b)
		for _, at := range []struct{ name, prefix string }{{"string", `{"ab`}, {"key", `{"a": 1, `}} {
			m := NewMatcher(JSON(), v)
			for i := 0; i < len(at.prefix); i++ {
				if err := m.Accept(singleByteToken(b, v, at.prefix[i])); err != nil {
					b.Fatal(err)
				}
			}
			mask := make([]uint64, (v.Len()+63)/64)
			b.Run(kind+"/"+at.name+"/fresh", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					clear(m.masks)
					m.Mask(mask)
				}
			})
			b.Run(kind+"/"+at.name+"/cached", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					m.Mask(mask)
				}
			})
		}
	}
}

// BenchmarkSchemaReplay: the grammar's work per token (a fresh Matcher's
// mask and acceptance, as a request's sampler at temperature 1 does)
// over a text sampled under a JSON schema with the real Llama 2 and
// Llama 3 vocabularies: ns/token against a model's decode step is the
// grammar's share of the step.
func BenchmarkSchemaReplay(b *testing.B) {
	const schema = `{"type":"array","items":{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0},"tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3}},"required":["name","age"],"additionalProperties":false},"minItems":100,"maxItems":1000}`
	g, err := Schema([]byte(schema))
	if err != nil {
		b.Fatal(err)
	}
	for _, kind := range []string{"spm", "bpe"} {
		_, v := vocabs[kind].get(b)
		ids := sampleIDs(b, g, v, rand.New(rand.NewPCG(1, 2)), 256)
		mask := make([]uint64, (v.Len()+63)/64)
		b.Run(kind, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				m := NewMatcher(g, v)
				for _, id := range ids {
					m.Mask(mask)
					if err := m.Accept(id); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids)), "ns/token")
		})
	}
}

// sampleIDs draws n tokens under g, uniformly among the allowed ones.
func sampleIDs(b *testing.B, g *Grammar, v *Vocab, rng *rand.Rand, n int) []int32 {
	m := NewMatcher(g, v)
	mask := make([]uint64, (v.Len()+63)/64)
	var ids, allowed []int32
	for len(ids) < n {
		m.Mask(mask)
		allowed = allowed[:0]
		for id := 0; id < v.Len(); id++ {
			if mask[id>>6]&(1<<(id&63)) != 0 && !v.eog[id] {
				allowed = append(allowed, int32(id))
			}
		}
		id := allowed[rng.IntN(len(allowed))]
		if err := m.Accept(id); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}
