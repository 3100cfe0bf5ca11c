package grammar

import (
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
