// Package quant chooses the type each weight matrix of a llama model is
// stored in: one type for every matrix ("q8_0", "q4_k"), or one of
// llama.cpp's mixes ("q4_k_m", ...), which give some tensors more bits than
// others. The mixes follow llama.cpp's llama_tensor_get_type
// (src/llama-quant.cpp) for a dense llama model quantized without an
// importance matrix, so a file modrun makes has the tensor types that
// llama-quantize would give it (one exception: see fallback).
package quant

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
)

// Scheme types a model's weight matrices. The zero Scheme is not valid.
type Scheme struct {
	name     string          // the --type value
	base     gguf.TensorType // the type of most matrices
	fileType uint32          // general.file_type: llama.cpp's llama_ftype
	mix      bool            // llama.cpp's per-tensor rules apply
}

// schemes are the --type values, in the order help texts list them. The
// K-quant names llama.cpp gives a mix (q2_k, q6_k) are its mixes; q3_k, q4_k
// and q5_k, which llama.cpp has no mix of, put every matrix in that type.
var schemes = []Scheme{
	{"f32", gguf.TypeF32, 0, false},
	{"f16", gguf.TypeF16, 1, false},
	{"q8_0", gguf.TypeQ8_0, 7, false},
	{"q4_0", gguf.TypeQ4_0, 2, false},
	{"q4_1", gguf.TypeQ4_1, 3, false},
	{"q5_0", gguf.TypeQ5_0, 8, false},
	{"q5_1", gguf.TypeQ5_1, 9, false},
	{"q3_k", gguf.TypeQ3_K, 11, false},
	{"q4_k", gguf.TypeQ4_K, 14, false},
	{"q5_k", gguf.TypeQ5_K, 16, false},
	{"q2_k", gguf.TypeQ2_K, 10, true},
	{"q3_k_s", gguf.TypeQ3_K, 11, true},
	{"q3_k_m", gguf.TypeQ3_K, 12, true},
	{"q3_k_l", gguf.TypeQ3_K, 13, true},
	{"q4_k_s", gguf.TypeQ4_K, 14, true},
	{"q4_k_m", gguf.TypeQ4_K, 15, true},
	{"q5_k_s", gguf.TypeQ5_K, 16, true},
	{"q5_k_m", gguf.TypeQ5_K, 17, true},
	{"q6_k", gguf.TypeQ6_K, 18, true},
}

// Names lists the --type values: "f32, f16, q8_0, ...".
func Names() string {
	names := make([]string, len(schemes))
	for i, s := range schemes {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}

// Parse reads a --type value (case does not matter).
func Parse(name string) (Scheme, error) {
	for _, s := range schemes {
		if strings.EqualFold(name, s.name) {
			return s, nil
		}
	}
	return Scheme{}, fmt.Errorf("type %q: want one of %s", name, Names())
}

// Pure is the scheme that stores every matrix as t (t from Parse's list).
func Pure(t gguf.TensorType) (Scheme, error) {
	for _, s := range schemes {
		if s.base == t && !s.mix {
			return s, nil
		}
	}
	return Scheme{}, fmt.Errorf("type %s: want one of %s", t, Names())
}

func (s Scheme) String() string { return s.name }

// IsZero reports whether s is the zero Scheme (none chosen).
func (s Scheme) IsZero() bool { return s.name == "" }

// Base is the type of most matrices.
func (s Scheme) Base() gguf.TensorType { return s.base }

// IsMix reports whether the scheme is one of llama.cpp's mixes.
func (s Scheme) IsMix() bool { return s.mix }

// FileType is general.file_type for a file of this scheme (llama_ftype).
func (s Scheme) FileType() uint32 { return s.fileType }

// Model is what the mixes' rules look at.
type Model struct {
	NLayer, NHead, NKVHead int
	TiedOutput             bool // no output.weight: token_embd.weight is the output matrix
}

// TypeOf is the type of the weight matrix name (a GGUF tensor name, e.g.
// "blk.3.attn_v.weight") whose rows have cols elements. Norms and MoD
// tensors are not weight matrices: they stay F32 whatever the scheme.
func (s Scheme) TypeOf(name string, cols int, m Model) gguf.TensorType {
	t := s.base
	if s.mix {
		t = s.mixType(name, cols, m)
	}
	return fallback(t, cols)
}

// mixType is llama_tensor_get_type's choice for the mixes of schemes, for a
// llama model with one expert. Layer counters: llama.cpp counts attn_v and
// ffn_down tensors in file order, which is the block index in files whose
// blocks come in order (llama.cpp's and modrun's).
func (s Scheme) mixType(name string, cols int, m Model) gguf.TensorType {
	t := s.base
	layer, role := splitName(name)
	n := m.NLayer
	switch {
	case role == mod.TensorOutput || (m.TiedOutput && role == mod.TensorTokenEmbd):
		// The output matrix gets 6 bits, or Q8_0 when its rows are no whole
		// number of the base type's blocks.
		if cols%t.BlockSize() != 0 {
			return gguf.TypeQ8_0
		}
		return gguf.TypeQ6_K
	case role == mod.TensorAttnV:
		switch s.name {
		case "q2_k":
			t = gguf.TypeQ3_K
			if m.NKVHead > 0 && m.NHead/m.NKVHead >= 4 {
				t = gguf.TypeQ4_K
			}
		case "q3_k_m":
			t = gguf.TypeQ4_K
			if layer < 2 {
				t = gguf.TypeQ5_K
			}
		case "q3_k_l":
			t = gguf.TypeQ5_K
		case "q4_k_m", "q5_k_m":
			if useMoreBits(layer, n) {
				t = gguf.TypeQ6_K
			}
		case "q4_k_s":
			if layer < 4 {
				t = gguf.TypeQ5_K
			}
		}
		// A 70B llama shares each V matrix among 8 heads: more bits cost little.
		if n == 80 && m.NHead != m.NKVHead && (t == gguf.TypeQ3_K || t == gguf.TypeQ4_K) {
			t = gguf.TypeQ5_K
		}
	case role == mod.TensorFFNDown:
		switch {
		case s.name == "q2_k":
			t = gguf.TypeQ3_K
		case s.name == "q3_k_m":
			t = gguf.TypeQ4_K
			if layer < n/16 {
				t = gguf.TypeQ5_K
			}
		case s.name == "q3_k_l":
			t = gguf.TypeQ5_K
		case (s.name == "q4_k_m" || s.name == "q5_k_m") && useMoreBits(layer, n):
			t = gguf.TypeQ6_K
		case s.name == "q4_k_s" && layer < n/8:
			t = gguf.TypeQ5_K
		}
	case role == mod.TensorAttnOutput:
		switch s.name {
		case "q2_k":
			t = gguf.TypeQ3_K
		case "q3_k_m":
			t = gguf.TypeQ4_K
		case "q3_k_l":
			t = gguf.TypeQ5_K
		}
	}
	return t
}

// useMoreBits picks the layers llama.cpp's _M mixes favour: the first and
// last eighth, and every third layer between.
func useMoreBits(layer, n int) bool {
	return layer < n/8 || layer >= 7*n/8 || (layer-n/8)%3 == 2
}

// splitName splits "blk.3.attn_v.weight" into 3 and "attn_v.weight"; a
// name outside the blocks gives -1 and itself.
func splitName(name string) (layer int, role string) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1, name
	}
	num, role, ok := strings.Cut(rest, ".")
	l, err := strconv.Atoi(num)
	if !ok || err != nil {
		return -1, name
	}
	return l, role
}

// fallback is the type llama.cpp stores a matrix in when its rows are no
// whole number of t's blocks: a type of 32-element blocks with about as many
// bits, else F16. The one difference: for Q2_K and Q3_K llama.cpp takes
// IQ4_NL, which modrun does not have; Q4_0 has the same size (4.5 bits).
func fallback(t gguf.TensorType, cols int) gguf.TensorType {
	if cols%t.BlockSize() == 0 {
		return t
	}
	switch t {
	case gguf.TypeQ2_K, gguf.TypeQ3_K:
		t = gguf.TypeQ4_0
	case gguf.TypeQ4_K:
		t = gguf.TypeQ5_0
	case gguf.TypeQ5_K:
		t = gguf.TypeQ5_1
	case gguf.TypeQ6_K:
		t = gguf.TypeQ8_0
	}
	if cols%t.BlockSize() != 0 {
		return gguf.TypeF16
	}
	return t
}
