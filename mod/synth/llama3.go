package synth

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/tokenizer"
)

// The Llama 3 features of a shape (Shape.Llama3, llama3.2-1b): Llama 3's
// vocabulary layout, its chat template, RoPE at base 500000 with Llama
// 3.2's frequency factors, and the output tied to the token embedding.

// Llama 3's vocabulary: 128,000 byte-level BPE pieces (here the 256 bytes,
// then pieces made by merges), then 256 special tokens.
const (
	llama3Vocab     = 128256
	llama3Special0  = 128000 // <|begin_of_text|>, the first special token
	llama3BOS       = 128000
	llama3EOS       = 128001 // <|end_of_text|>
	llama3EOT       = 128009 // <|eot_id|>: ends a turn
	llama3RopeBase  = 500000
	llama3RopeScale = 32 // Llama 3.2's rope_scaling: factor 32, low and high frequency factors 1 and 4, original context 8192
)

// llama3Specials are the named special tokens from id 128000 on (Llama 3.1
// and 3.2); the rest, to 128255, are <|reserved_special_token_N|>, N
// counting on from 3.
var llama3Specials = []string{
	"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
	"<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
	"<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
}

// llama3ChatTemplate is a Jinja chat template in Llama 3's header format,
// which tokenizer.DetectChatTemplate recognises as "llama3".
const llama3ChatTemplate = "{{- bos_token }}{%- for message in messages %}" +
	"{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}" +
	"{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"

// llama3Tokenizer is the metadata of the vocabulary, as llama.cpp's
// converter writes a Llama 3 model's: tokens, their types (1 normal, 3
// control), merges (the pieces' making, in rank order), and the ids.
// Pieces after the bytes are words of lowercase letters, with or without a
// leading space ("Ġ"), shortest first: each merges its prefix with its last
// letter, so text in lowercase words encodes to pieces.
func llama3Tokenizer() []kv {
	tokens := make([]string, llama3Vocab)
	types := make([]int32, llama3Vocab)
	for b := 0; b < 256; b++ {
		tokens[b], types[b] = tokenizer.ByteLevel([]byte{byte(b)}), 1
	}
	merges := make([]string, 0, llama3Special0-256)
	space := tokenizer.ByteLevel([]byte{' '})
	id := 256
	add := func(prefix, last string) {
		if id < llama3Special0 {
			tokens[id], types[id] = prefix+last, 1
			merges = append(merges, prefix+" "+last)
			id++
		}
	}
	words := []string{""} // the words of the previous length
	for id < llama3Special0 {
		var next []string
		for _, lead := range []string{space, ""} {
			for _, w := range words {
				for c := 'a'; c <= 'z'; c++ {
					if lead+w == "" {
						continue // single letters are byte tokens
					}
					add(lead+w, string(c))
				}
			}
		}
		for _, w := range words {
			for c := 'a'; c <= 'z'; c++ {
				next = append(next, w+string(c))
			}
		}
		words = next
	}
	for i := llama3Special0; i < llama3Vocab; i++ {
		if j := i - llama3Special0; j < len(llama3Specials) {
			tokens[i] = llama3Specials[j]
		} else {
			tokens[i] = fmt.Sprintf("<|reserved_special_token_%d|>", j-len(llama3Specials)+3)
		}
		types[i] = 3
	}
	return []kv{
		{"tokenizer.ggml.model", gguf.Scalar(tokenizer.ModelBPE)},
		{"tokenizer.ggml.pre", gguf.Scalar("llama-bpe")},
		{"tokenizer.ggml.tokens", gguf.Array(tokens)},
		{"tokenizer.ggml.token_type", gguf.Array(types)},
		{"tokenizer.ggml.merges", gguf.Array(merges)},
		{"tokenizer.ggml.bos_token_id", gguf.Scalar(uint32(llama3BOS))},
		{"tokenizer.ggml.eos_token_id", gguf.Scalar(uint32(llama3EOS))},
		{"tokenizer.ggml.eot_token_id", gguf.Scalar(uint32(llama3EOT))},
		{"tokenizer.ggml.add_bos_token", gguf.Scalar(true)},
		{"tokenizer.ggml.add_eos_token", gguf.Scalar(false)},
		{tokenizer.KeyChatTemplate, gguf.Scalar(llama3ChatTemplate)},
	}
}

// llama3RopeFactors are rope_freqs.weight for heads of hd.
func llama3RopeFactors(hd int) ([]float32, error) {
	return mod.Llama3RopeFactors(hd, llama3RopeBase, llama3RopeScale, 1, 4, 8192)
}

// A tied output cannot make greedy decoding walk a cycle by itself: a
// token's own embedding is always its best match. So with the output tied,
// block 0's MLP moves each token to its successor:
//   - the embeddings are an orbit: cycle member number k (in cycle order)
//     has e_k = R^k e_0, where R rotates pair i of dimensions (2+2i, 3+2i)
//     by 2 pi m_i / N (N members, m_i random distinct integers, so R^N = 1
//     and the orbit closes); pairs have norm 1, so two members' embeddings
//     are nearly orthogonal (their dot is a sum of cosines of random
//     phases) and a member's dot with itself is the number of pairs P;
//   - dimension 0 holds the constant orbitBias (dimension 1 is 0), which
//     block 0's gate rows read: silu of it is one constant g0 for every
//     token, so the MLP's output, Down (g0 * Up xn), is linear in the
//     normed input, and Up is set so that it adds (orbitGain R - I) x:
//     the block's output is orbitGain times the successor's embedding;
//   - a token outside the cycle (a special token) embeds as half of some
//     member's, so it is never the best match of a member's successor and
//     continues as that member does.
//
// The other blocks are random as in the untied shapes.
const (
	orbitGain = 2 // the successor's share of block 0's output
)

// orbit is the tied embedding's structure.
type orbit struct {
	n      int       // cycle members
	index  []int32   // [nVocab] the member number k of each token; for a non-member, the member it is half of
	member []bool    // [nVocab]
	m      []int64   // [P] each pair's turns per step, times n
	phase  []float64 // [P]
}

// newOrbit numbers the cycle next (a successor map, -1 for non-members)
// from the first member on, and draws the pairs' frequencies and phases;
// non-members get a member to follow, and next is completed for them.
func (b *builder) newOrbit(next []int32) *orbit {
	nv := len(next)
	o := &orbit{index: make([]int32, nv), member: make([]bool, nv)}
	start := int32(-1)
	for t, s := range next {
		if s >= 0 {
			start = int32(t)
			break
		}
	}
	for t, k := start, 0; k == 0 || t != start; t, k = next[t], k+1 {
		o.index[t], o.member[t] = int32(k), true
		o.n++
	}
	byIndex := make([]int32, o.n)
	for t := range next {
		if o.member[t] {
			byIndex[o.index[t]] = int32(t)
		}
	}
	g := rand.New(b.rng("orbit", 0))
	for t := range next {
		if !o.member[t] {
			k := g.IntN(o.n)
			o.index[t] = int32(k)
			next[t] = byIndex[(k+1)%o.n]
		}
	}
	pairs := b.s.NEmbd/2 - 1
	seen := map[int64]bool{}
	for len(o.m) < pairs {
		// m in [1, n/2): m and n-m would be the same rotation's two senses.
		m := 1 + g.Int64N(max(int64(o.n/2)-1, 1))
		if seen[m] && len(seen) < o.n/2-1 {
			continue
		}
		seen[m] = true
		o.m, o.phase = append(o.m, m), append(o.phase, 2*math.Pi*g.Float64())
	}
	return o
}

// orbitBias is dimension 0 of every embedding: half the norm of the pairs.
func (o *orbit) bias() float32 { return float32(math.Sqrt(float64(len(o.m))) / 2) }

// norm is the length of a member's embedding.
func (o *orbit) norm() float32 {
	b := float64(o.bias())
	return float32(math.Sqrt(b*b + float64(len(o.m))))
}

// row is token t's embedding.
func (o *orbit) row(t int, dst []float32) {
	clear(dst)
	dst[0] = o.bias()
	k := int64(o.index[t])
	scale := float32(1)
	if !o.member[t] {
		scale = 0.5
	}
	for i, m := range o.m {
		a := 2*math.Pi*float64(m*k%int64(o.n))/float64(o.n) + o.phase[i]
		dst[2+2*i], dst[3+2*i] = scale*float32(math.Cos(a)), scale*float32(math.Sin(a))
	}
}

// cycleMLP adds block 0's gate, up and down (see orbit), given its
// ffn_norm weights w.
func (b *builder) cycleMLP(o *orbit, w []float32) error {
	d, nFF := b.s.NEmbd, b.s.NFF
	bt := func(n string) string { return mod.BlockTensor(0, n) }
	bias := float64(o.bias())
	rms := float64(o.norm()) / math.Sqrt(float64(d)) // of every member's embedding
	z := float64(w[0]) * bias / rms
	g0 := z / (1 + math.Exp(-z)) // silu of the gate
	if err := b.rows(bt(mod.TensorFFNGate), d, nFF, func(j int, dst []float32) {
		clear(dst)
		if j < d {
			dst[0] = 1
		}
	}); err != nil {
		return err
	}
	if err := b.rows(bt(mod.TensorFFNUp), d, nFF, func(j int, dst []float32) {
		clear(dst)
		if j < 2 || j >= d {
			return
		}
		i := (j - 2) / 2
		theta := 2 * math.Pi * float64(o.m[i]) / float64(o.n)
		c, s := orbitGain*math.Cos(theta), orbitGain*math.Sin(theta)
		a := 2 + 2*i
		col := func(c int) float64 { return rms / float64(w[c]) / g0 } // xn -> x, over the gate
		if j == a {                                                    // (orbitGain R - I) row a: (gc - 1, -gs)
			dst[a], dst[a+1] = float32((c-1)*col(a)), float32(-s*col(a+1))
		} else { // row a+1: (gs, gc - 1)
			dst[a], dst[a+1] = float32(s*col(a)), float32((c-1)*col(a+1))
		}
	}); err != nil {
		return err
	}
	return b.rows(bt(mod.TensorFFNDown), nFF, d, func(j int, dst []float32) {
		clear(dst)
		dst[j] = 1
	})
}
