package shaders

// Tests of the embedding lookup (embed.comp) of every weight type against
// the CPU reference's rows, whole and split at the binding range.

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/require"
)

// ---- Embedding lookup

var embedVariantOf = map[gguf.TensorType]string{
	gguf.TypeF32: "embed_f32",
	gguf.TypeF16: "embed_f16",
}

// embedRun looks up n tokens (the first and last ids among them, and
// repeats) in a vocab x cols table of type typ. With split > 0 the table
// is bound in two pieces, rows [0, split) and [split, vocab), one dispatch
// each, as a table over maxStorageBufferRange must be; run records the
// second. With repack the table is uploaded in matvec's split layout
// (MatvecBytes), bound whole.
func embedRun(t testing.TB, dev *vk.Device, k *vk.Kernel, typ gguf.TensorType, vocab, cols, n, split int, seed int64, repack bool) (*denseRun, *denseRun) {
	rng := rand.New(rand.NewSource(seed))
	table, err := gguf.Quantize(typ, denseNormals(rng, vocab*cols, 1))
	require.NoError(t, err)
	m, err := mod.NewMat("token_embd", typ, []uint64{uint64(cols), uint64(vocab)}, table)
	require.NoError(t, err)
	tok := []uint32{0, uint32(vocab - 1)}
	for len(tok) < n {
		tok = append(tok, uint32(rng.Intn(vocab)))
	}
	tok = tok[:n]
	if n > 3 {
		tok[3] = tok[0] // a repeat
	}
	want, scale := make([]float64, n*cols), make([]float64, n*cols)
	row := make([]float32, cols)
	for i, id := range tok {
		m.Row(int(id), row)
		for e, v := range row {
			want[i*cols+e], scale[i*cols+e] = float64(v), 1
		}
	}
	rowBytes := len(table) / vocab
	if repack {
		require.Zero(t, split, "a split-layout table is bound whole")
		table, err = MatvecBytes(matvecTypeOf[typ], table, vocab, cols)
		require.NoError(t, err)
	}
	wb, tb, out := newBuffer(t, dev, table), newBuffer(t, dev, u32bytes(tok)), denseNaNBuffer(t, dev, n*cols)
	piece := func(base, rows int) *denseRun {
		return &denseRun{
			k: k, push: EmbedPush{Cols: uint32(cols), N: uint32(n), RowBase: uint32(base), Rows: uint32(rows)},
			groups: Groups(uint32(n)),
			binds: []vk.Bind{{Buf: wb, Offset: uint64(base * rowBytes), Size: uint64(rows * rowBytes), Access: vk.Read},
				denseBind(tb, vk.Read), denseBind(out, vk.Write)},
			bytes: n * (rowBytes + 4*cols), tol: 0,
			result: func() ([]float32, []float64, []float64) { return download(t, out, n*cols), want, scale },
		}
	}
	if split == 0 {
		whole := piece(0, vocab)
		whole.binds[0].Size = 0 // the rest of the buffer: its size rounded up to 4
		return nil, whole
	}
	second := piece(split, vocab-split)
	second.binds[0].Size = 0
	return piece(0, split), second
}

func TestEmbed(t *testing.T) {
	dev := openDevice(t)
	shapes := map[gguf.TensorType][][2]int{ // vocab, cols
		gguf.TypeF32:  {{5, 7}, {37, 33}, {100, 96}},
		gguf.TypeF16:  {{5, 7}, {37, 33}, {100, 96}},   // odd cols: rows do not start on a word
		gguf.TypeQ8_0: {{5, 32}, {37, 96}, {100, 160}}, // 160: 5 blocks, rows alternate 4-alignment
	}
	for _, typ := range gguf.SupportedTypes {
		switch {
		case typ == gguf.TypeBF16:
			shapes[typ] = shapes[gguf.TypeF16]
		case typ.BlockSize() == 32:
			shapes[typ] = shapes[gguf.TypeQ8_0]
		case typ.BlockSize() == 256:
			shapes[typ] = [][2]int{{5, 256}, {37, 768}} // 768: 3 super-blocks
		}
	}
	type variant struct {
		typ    gguf.TensorType
		name   string
		repack bool
	}
	var variants []variant
	for _, typ := range []gguf.TensorType{gguf.TypeF32, gguf.TypeF16} {
		variants = append(variants, variant{typ, embedVariantOf[typ], false})
	}
	// Every type's variant that reads its device layout, as the engine
	// uploads it (MatvecBytes); the quantized ones are repacked.
	for _, typ := range gguf.SupportedTypes {
		if typ == gguf.TypeF32 || typ == gguf.TypeF16 {
			continue // the same variant as above
		}
		variants = append(variants, variant{typ, EmbedName(matvecTypeOf[typ]), typ.BlockSize() > 1})
	}
	var w denseWorst
	for _, v := range variants {
		typ := v.typ
		k := newKernel(t, dev, lookup(t, v.name))
		for _, sh := range shapes[typ] {
			for _, n := range []int{1, 2, 9} {
				// Split at row 8: 8 rows of any type here are a multiple of
				// 16 bytes, lavapipe's offset alignment.
				for _, split := range []int{0, 8} {
					if split >= sh[0] || (v.repack && split > 0) {
						continue
					}
					name := fmt.Sprintf("%s/vocab%d/cols%d/n%d/split%d", v.name, sh[0], sh[1], n, split)
					first, last := embedRun(t, dev, k, typ, sh[0], sh[1], n, split, int64(sh[0]+n), v.repack)
					if first != nil {
						rec := dev.NewRecorder()
						first.record(rec)
						require.NoError(t, dev.Run(rec))
						rec.Close()
					}
					if err := last.run(t, dev, &w); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			}
		}
	}
	w.log(t, 0)
}
