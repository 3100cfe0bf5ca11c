// Package synth makes random-weight models of standard Llama shapes in
// memory, dense or as a MoD twin with calibrated routers, so that modrun
// can be benchmarked at the sizes people run without a model to download
// (`modrun bench --synthetic`). The same shape, type and seed give the same
// bytes on every machine.
package synth

import (
	"fmt"
	"strconv"
	"strings"
)

// Shape is the size of a Llama model.
type Shape struct {
	Name       string
	NEmbd      int // width of the residual stream
	NLayer     int // blocks
	NHead      int // query heads
	NKVHead    int // key/value heads
	NFF        int // hidden width of the SwiGLU MLP
	NVocab     int // tokens
	ContextLen int // longest sequence
	// Llama3 gives the shape Llama 3's features: its vocabulary layout
	// (byte-level BPE, 128,256 tokens with its special tokens and chat
	// template), RoPE at base 500000 with Llama 3.2's frequency factors,
	// and the output tied to the token embedding.
	Llama3 bool
}

// Shapes are the named shapes, after the models they copy. The context of
// stories15m is 1024 rather than llama2.c's 256, so that a 512-token
// prompt fits.
var Shapes = []Shape{
	{Name: "stories260k", NEmbd: 64, NLayer: 5, NHead: 8, NKVHead: 4, NFF: 172, NVocab: 512, ContextLen: 512},
	{Name: "stories15m", NEmbd: 288, NLayer: 6, NHead: 6, NKVHead: 6, NFF: 768, NVocab: 32000, ContextLen: 1024},
	{Name: "tinyllama-1.1b", NEmbd: 2048, NLayer: 22, NHead: 32, NKVHead: 4, NFF: 5632, NVocab: 32000, ContextLen: 2048},
	{Name: "llama2-7b", NEmbd: 4096, NLayer: 32, NHead: 32, NKVHead: 32, NFF: 11008, NVocab: 32000, ContextLen: 4096},
	{Name: "llama3.2-1b", NEmbd: 2048, NLayer: 16, NHead: 32, NKVHead: 8, NFF: 8192, NVocab: llama3Vocab, ContextLen: 131072, Llama3: true},
}

// minVocab holds <unk>, <s>, </s>, the 256 byte tokens, "▁" and one piece.
const minVocab = 3 + 256 + 2

// ParseShape reads a named shape ("tinyllama-1.1b"), a custom one
// ("d=2048,L=4,h=32,kv=4,ff=5632,vocab=32000,ctx=2048"), or a named shape
// with some of its sizes changed ("llama3.2-1b,d=256,L=2,h=4,kv=2,ff=512":
// its features at a cheaper size). In a custom shape d and L are required;
// h defaults to d/64 (at least 1), kv to h, ff to 8d/3 rounded up to a
// multiple of 32, vocab to 32000 and ctx to 2048.
func ParseShape(s string) (Shape, error) {
	base, rest, hasSizes := strings.Cut(s, ",")
	var named *Shape
	for i, sh := range Shapes {
		if strings.EqualFold(strings.TrimSpace(base), sh.Name) {
			named = &Shapes[i]
		}
	}
	if named == nil {
		rest = s
	}
	if named != nil && !hasSizes {
		return *named, nil
	}
	if !strings.Contains(s, "=") {
		names := make([]string, len(Shapes))
		for i, sh := range Shapes {
			names[i] = sh.Name
		}
		return Shape{}, fmt.Errorf("synthetic shape %q: not one of %s, nor of the form d=2048,L=4,h=32,kv=4,ff=5632,vocab=32000,ctx=2048 (or NAME,d=...)", s, strings.Join(names, ", "))
	}
	v := map[string]int{}
	for _, kv := range strings.Split(rest, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		n, err := strconv.Atoi(val)
		if !ok || err != nil || n < 1 {
			return Shape{}, fmt.Errorf("synthetic shape %q: %q is not KEY=POSITIVE-INTEGER", s, kv)
		}
		switch k {
		case "d", "L", "h", "kv", "ff", "vocab", "ctx":
		default:
			return Shape{}, fmt.Errorf("synthetic shape %q: unknown key %q (d, L, h, kv, ff, vocab, ctx)", s, k)
		}
		if _, dup := v[k]; dup {
			return Shape{}, fmt.Errorf("synthetic shape %q: %s given twice", s, k)
		}
		v[k] = n
	}
	if named != nil {
		return named.with(v, s)
	}
	if v["d"] == 0 || v["L"] == 0 {
		return Shape{}, fmt.Errorf("synthetic shape %q: d and L are required", s)
	}
	or := func(k string, def int) int {
		if n, ok := v[k]; ok {
			return n
		}
		return def
	}
	sh := Shape{NEmbd: v["d"], NLayer: v["L"]}
	sh.NHead = or("h", max(1, sh.NEmbd/64))
	sh.NKVHead = or("kv", sh.NHead)
	sh.NFF = or("ff", (8*sh.NEmbd/3+31)/32*32)
	sh.NVocab = or("vocab", 32000)
	sh.ContextLen = or("ctx", 2048)
	sh.Name = fmt.Sprintf("d%d-L%d-h%d-kv%d-ff%d-v%d", sh.NEmbd, sh.NLayer, sh.NHead, sh.NKVHead, sh.NFF, sh.NVocab)
	return sh, sh.check()
}

// with is the named shape s with the sizes in v changed, named after both
// ("llama3.2-1b-d256-L2-h4-kv2-ff512-v128256").
func (s Shape) with(v map[string]int, spec string) (Shape, error) {
	for k, p := range map[string]*int{"d": &s.NEmbd, "L": &s.NLayer, "h": &s.NHead, "kv": &s.NKVHead, "ff": &s.NFF, "vocab": &s.NVocab, "ctx": &s.ContextLen} {
		if n, ok := v[k]; ok {
			*p = n
		}
	}
	if s.Llama3 && s.NVocab != llama3Vocab {
		return Shape{}, fmt.Errorf("synthetic shape %q: a Llama 3 shape's vocabulary is %d (its special tokens' ids are fixed)", spec, llama3Vocab)
	}
	s.Name = fmt.Sprintf("%s-d%d-L%d-h%d-kv%d-ff%d-v%d", s.Name, s.NEmbd, s.NLayer, s.NHead, s.NKVHead, s.NFF, s.NVocab)
	return s, s.check()
}

// cycleMembers are the tokens greedy decoding cycles through: all but
// those that stop it or are never text (</s>, <unk>; a Llama 3 shape's
// special tokens).
func (s Shape) cycleMembers() []int32 {
	var out []int32
	if s.Llama3 {
		for t := 0; t < llama3Special0; t++ {
			out = append(out, int32(t))
		}
		return out
	}
	out = append(out, tokBOS)
	for t := tokByte0; t < s.NVocab; t++ {
		out = append(out, int32(t))
	}
	return out
}

// check refuses shapes the model cannot take; mod.ConfigFromGGUF checks
// the limits again when the model is loaded.
func (s Shape) check() error {
	switch {
	case s.NEmbd%s.NHead != 0:
		return fmt.Errorf("synthetic shape %s: d=%d is not a multiple of h=%d", s.Name, s.NEmbd, s.NHead)
	case s.NHead%s.NKVHead != 0:
		return fmt.Errorf("synthetic shape %s: h=%d is not a multiple of kv=%d", s.Name, s.NHead, s.NKVHead)
	case (s.NEmbd/s.NHead)%2 != 0:
		return fmt.Errorf("synthetic shape %s: the head width d/h=%d is odd; RoPE rotates pairs", s.Name, s.NEmbd/s.NHead)
	case s.NEmbd < 8:
		return fmt.Errorf("synthetic shape %s: d=%d is below 8", s.Name, s.NEmbd)
	case s.NVocab < minVocab:
		return fmt.Errorf("synthetic shape %s: vocab=%d is below %d (specials, 256 bytes, a space and a piece)", s.Name, s.NVocab, minVocab)
	case s.Llama3 && s.NFF < s.NEmbd:
		return fmt.Errorf("synthetic shape %s: ff=%d is below d=%d; a tied shape's block 0 moves each token to its successor through d of its ff units", s.Name, s.NFF, s.NEmbd)
	case s.NEmbd > 1<<16 || s.NFF > 1<<20 || s.NLayer > 1<<10 || s.NVocab > 1<<20 || s.ContextLen > 1<<20:
		return fmt.Errorf("synthetic shape %s: larger than modrun takes (d <= 65536, ff <= 2^20, L <= 1024, vocab <= 2^20, ctx <= 2^20)", s.Name)
	}
	return nil
}

// Params is the number of weights, embedding and output matrix (once when
// tied) included.
func (s Shape) Params() int64 {
	d, kv := int64(s.NEmbd), int64(s.NKVHead*(s.NEmbd/s.NHead))
	block := d*d*2 + 2*d*kv + 3*d*int64(s.NFF) + 2*d
	heads := int64(2)
	if s.Llama3 {
		heads = 1
	}
	return int64(s.NLayer)*block + heads*int64(s.NVocab)*d + d
}
