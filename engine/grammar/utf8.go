package grammar

import (
	"sort"
	"unicode/utf8"
)

// Code point ranges to UTF-8 byte-range sequences: a class such as
// [^"\\] becomes alternatives like [\x00-\x21] | [\xC2-\xDF][\x80-\xBF] |
// ..., each a sequence of byte ranges whose product is exactly the UTF-8
// encodings of some code points of the class. The recognizer then never
// decodes a character: a token may stop inside one (the same split as
// Rust's utf8-ranges and Go's regexp compilers make).

type byteRange struct{ lo, hi byte }

// normalize sorts ranges, merges overlapping and adjacent ones, and drops
// the surrogates, which UTF-8 cannot encode.
func normalize(rs []runeRange) []runeRange {
	var cut []runeRange
	for _, r := range rs {
		if r.lo < 0xD800 && r.hi > 0xDFFF {
			cut = append(cut, runeRange{r.lo, 0xD7FF}, runeRange{0xE000, r.hi})
			continue
		}
		if r.lo >= 0xD800 && r.lo <= 0xDFFF {
			r.lo = 0xE000
		}
		if r.hi >= 0xD800 && r.hi <= 0xDFFF {
			r.hi = 0xD7FF
		}
		if r.lo <= r.hi {
			cut = append(cut, r)
		}
	}
	sort.Slice(cut, func(i, j int) bool { return cut[i].lo < cut[j].lo })
	var out []runeRange
	for _, r := range cut {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// complement is every scalar value not in rs (normalized).
func complement(rs []runeRange) []runeRange {
	var out []runeRange
	next := rune(0)
	for _, r := range rs {
		if r.lo > next {
			out = append(out, runeRange{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, runeRange{next, utf8.MaxRune})
	}
	return normalize(out)
}

// utf8Sequences splits normalized ranges into byte-range sequences.
func utf8Sequences(rs []runeRange) [][]byteRange {
	var out [][]byteRange
	for _, r := range rs {
		splitUTF8(r.lo, r.hi, &out)
	}
	return out
}

func splitUTF8(lo, hi rune, out *[][]byteRange) {
	if lo > hi {
		return
	}
	// Ranges whose ends encode to different lengths split at the boundary.
	for _, m := range []rune{0x7F, 0x7FF, 0xFFFF} {
		if lo <= m && m < hi {
			splitUTF8(lo, m, out)
			splitUTF8(m+1, hi, out)
			return
		}
	}
	if hi < 0x80 {
		*out = append(*out, []byteRange{{byte(lo), byte(hi)}})
		return
	}
	// Split until the ends differ only in continuation bytes that span
	// their whole range (0x80-0xBF), so that the byte ranges' product is
	// the code point range.
	for i := 1; i < utf8.UTFMax; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				splitUTF8(lo, lo|m, out)
				splitUTF8((lo|m)+1, hi, out)
				return
			}
			if hi&m != m {
				splitUTF8(lo, (hi&^m)-1, out)
				splitUTF8(hi&^m, hi, out)
				return
			}
		}
	}
	a := utf8.AppendRune(nil, lo)
	b := utf8.AppendRune(nil, hi)
	seq := make([]byteRange, len(a))
	for i := range a {
		seq[i] = byteRange{a[i], b[i]}
	}
	*out = append(*out, seq)
}
