package synth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/quant"
)

// Types are the weight types Options.Type takes: one type for every matrix
// (quant.Pure). Options.Scheme takes llama.cpp's mixes as well.
var Types = []gguf.TensorType{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_0,
	gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K}

// Options choose the weights of a synthetic model.
type Options struct {
	Type gguf.TensorType // of every weight matrix: one of Types
	// Scheme, when set (quant.Parse: "q4_k_m", ...), types each matrix
	// instead of Type, as llama.cpp's mixes do.
	Scheme quant.Scheme
	Seed   uint64 // the same seed gives the same model everywhere
	// Capacity > 0 makes the MoD twin: every other block (1, 3, 5, ...)
	// routed, with a router and a predictor calibrated so that causal
	// routing sends about this fraction of the tokens through each.
	Capacity float32
}

// Model is a synthetic model, loaded and ready to run.
type Model struct {
	*mod.Model
	Name  string // "stories15m-q8_0", its twin "stories15m-q8_0-mod"
	Shape Shape
	Data  []byte // the GGUF file the model is served from
	// Calibration holds, per routed layer, what calibration set; empty for
	// a dense model.
	Calibration []LayerCalibration
}

// Save writes the model's GGUF file to path, through a temporary file so
// that a failed write leaves nothing at path. A dense model is a plain
// llama GGUF that llama.cpp loads.
func (m *Model) Save(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("synth: save %s: %w", m.Name, err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	_, err = tmp.Write(m.Data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("synth: save %s to %s: %w", m.Name, path, err)
	}
	return nil
}

// The random weights are shaped so that a model computes real arithmetic
// yet decides its greedy tokens by a wide margin, the same on every backend:
//   - the token embeddings are random rows of unit variance, so two rows are
//     nearly orthogonal and a row's dot with itself is about nEmbd;
//   - output row π(t) is token t's embedding over sqrt(nEmbd), π a random
//     cycle through every token but </s> and <unk>: the logit of π(t) is
//     then about sqrt(nEmbd) when the last token is t, every other logit
//     about N(0, 1), and greedy decoding walks the cycle (varied tokens,
//     never EOS) instead of repeating itself;
//   - every block adds to the residual stream with its output matrices
//     scaled by 1/sqrt(2 nLayer), so all blocks together move it by about
//     as much as the embedding: large enough that a wrong kernel shows in
//     the logits, small enough to keep the argmax.
const (
	normJitter = 0.1 // norm weights are 1 ± this
)

// Build makes the model of shape s in memory.
func Build(s Shape, o Options) (*Model, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	scheme := o.Scheme
	if scheme.IsZero() {
		if !slices.Contains(Types, o.Type) {
			return nil, fmt.Errorf("synth: weight type %s: want one of %v", o.Type, Types)
		}
		var err error
		if scheme, err = quant.Pure(o.Type); err != nil {
			return nil, fmt.Errorf("synth: %w", err)
		}
	}
	if o.Capacity < 0 || o.Capacity > 1 || math.IsNaN(float64(o.Capacity)) {
		return nil, fmt.Errorf("synth: capacity %g is not in (0, 1]", o.Capacity)
	}
	b := &builder{s: s, o: o, scheme: scheme, w: gguf.NewWriter(), hd: s.NEmbd / s.NHead,
		qm: quant.Model{NLayer: s.NLayer, NHead: s.NHead, NKVHead: s.NKVHead}}
	b.perm = cycle(s.NVocab, b.rng("permutation", 0))
	b.prev = make([]int32, s.NVocab)
	for i := range b.prev {
		b.prev[i] = -1
	}
	for t, next := range b.perm {
		if next >= 0 {
			b.prev[next] = int32(t)
		}
	}
	name := s.Name + "-" + scheme.String()
	if o.Capacity > 0 {
		name += "-mod"
	}
	if err := b.metadata(name); err != nil {
		return nil, err
	}
	if err := b.tensors(); err != nil {
		return nil, err
	}
	if err := checkFits(name, b.w.DataBytes()); err != nil {
		return nil, err
	}
	data, err := b.w.Bytes()
	if err != nil {
		return nil, fmt.Errorf("synth: %s: %w", name, err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("synth: %s: %w", name, err)
	}
	f.Path = "synthetic:" + name
	mm, err := mod.FromFile(f)
	if err != nil {
		return nil, err
	}
	m := &Model{Model: mm, Name: name, Shape: s, Data: data}
	if o.Capacity > 0 {
		if err := m.calibrate(o.Capacity, b.perm); err != nil {
			return nil, err
		}
	}
	return m, nil
}

type builder struct {
	s      Shape
	o      Options
	scheme quant.Scheme // the matrices' types
	qm     quant.Model  // what the scheme's rules look at
	w      *gguf.Writer
	hd     int     // head width
	perm   []int32 // [nVocab] the greedy successor of each token; -1 for </s>, <unk>
	prev   []int32 // [nVocab] the token whose successor this one is; -1 for none
}

// Token ids of the byte-level vocabulary.
const (
	tokUnk, tokBOS, tokEOS = 0, 1, 2
	tokByte0               = 3   // <0x00> .. <0xFF>
	tokSpace               = 259 // "▁"
	tokPiece0              = 260 // "▁w0", "▁w1", ...
)

func (b *builder) metadata(name string) error {
	s, arch := b.s, mod.ArchLlama
	if b.o.Capacity > 0 {
		arch = mod.ArchMoD
	}
	ak := func(k string) string { return mod.ArchKey(arch, k) }
	tokens := make([]string, s.NVocab)
	scores := make([]float32, s.NVocab)
	types := make([]int32, s.NVocab)
	tokens[tokUnk], tokens[tokBOS], tokens[tokEOS] = "<unk>", "<s>", "</s>"
	types[tokUnk], types[tokBOS], types[tokEOS] = 2, 3, 3 // unknown, control
	for i := 0; i < 256; i++ {
		tokens[tokByte0+i], types[tokByte0+i] = fmt.Sprintf("<0x%02X>", i), 6 // byte
	}
	tokens[tokSpace], types[tokSpace] = "\u2581", 1
	for i := tokPiece0; i < s.NVocab; i++ {
		// Plain pieces that no text encodes to (no merge path leads to
		// them), so prompts are bytes and spaces; the model may emit them.
		tokens[i], types[i], scores[i] = fmt.Sprintf("\u2581w%d", i-tokPiece0), 1, -float32(i)
	}
	kvs := []struct {
		k string
		v gguf.Value
	}{
		{mod.KeyArchitecture, gguf.Scalar(arch)},
		{mod.KeyName, gguf.Scalar("modrun synthetic " + name)},
		{mod.KeyFileType, gguf.Scalar(b.scheme.FileType())},
		{ak(mod.KeyContextLength), gguf.Scalar(uint32(s.ContextLen))},
		{ak(mod.KeyEmbeddingLen), gguf.Scalar(uint32(s.NEmbd))},
		{ak(mod.KeyBlockCount), gguf.Scalar(uint32(s.NLayer))},
		{ak(mod.KeyFeedForwardLen), gguf.Scalar(uint32(s.NFF))},
		{ak(mod.KeyHeadCount), gguf.Scalar(uint32(s.NHead))},
		{ak(mod.KeyHeadCountKV), gguf.Scalar(uint32(s.NKVHead))},
		{ak(mod.KeyRMSEpsilon), gguf.Scalar(float32(1e-5))},
		{ak(mod.KeyRopeFreqBase), gguf.Scalar(float32(10000))},
		{ak(mod.KeyRopeDimCount), gguf.Scalar(uint32(b.hd))},
		{ak(mod.KeyVocabSize), gguf.Scalar(uint32(s.NVocab))},
	}
	if arch == mod.ArchMoD {
		var routed []uint32
		for l := 1; l < s.NLayer; l += 2 {
			routed = append(routed, uint32(l))
		}
		kvs = append(kvs, []struct {
			k string
			v gguf.Value
		}{
			{ak(mod.KeyRoutedLayers), gguf.Array(routed)},
			{ak(mod.KeyCapacity), gguf.Scalar(b.o.Capacity)},
			{ak(mod.KeyGate), gguf.Scalar(mod.GateSigmoid)},
			{ak(mod.KeyPredictorHidden), gguf.Scalar(uint32(b.s.NEmbd / 2))},
		}...)
	}
	kvs = append(kvs, []struct {
		k string
		v gguf.Value
	}{
		{"tokenizer.ggml.model", gguf.Scalar("llama")},
		{"tokenizer.ggml.tokens", gguf.Array(tokens)},
		{"tokenizer.ggml.scores", gguf.Array(scores)},
		{"tokenizer.ggml.token_type", gguf.Array(types)},
		{"tokenizer.ggml.bos_token_id", gguf.Scalar(uint32(tokBOS))},
		{"tokenizer.ggml.eos_token_id", gguf.Scalar(uint32(tokEOS))},
		{"tokenizer.ggml.unknown_token_id", gguf.Scalar(uint32(tokUnk))},
		{"tokenizer.ggml.add_bos_token", gguf.Scalar(true)},
		{"tokenizer.ggml.add_eos_token", gguf.Scalar(false)},
	}...)
	for _, kv := range kvs {
		if err := b.w.SetKV(kv.k, kv.v); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
	}
	return nil
}

// tensors adds every tensor in llama.cpp's order, each made by a fill
// function seeded by its name, so a dense model and its twin share them.
func (b *builder) tensors() error {
	s := b.s
	d, qd, kvd := s.NEmbd, s.NHead*b.hd, s.NKVHead*b.hd
	inv := func(n int) float64 { return 1 / math.Sqrt(float64(n)) }
	residual := 1 / math.Sqrt(2*float64(s.NLayer)) // the output matrices' scale (see above)
	if err := b.rows(mod.TensorTokenEmbd, d, s.NVocab, b.embeddingRow); err != nil {
		return err
	}
	for l := 0; l < s.NLayer; l++ {
		bt := func(n string) string { return mod.BlockTensor(l, n) }
		for _, t := range []struct {
			name       string
			rows, cols int
			std        float64
		}{
			{mod.TensorAttnQ, qd, d, inv(d)},
			{mod.TensorAttnK, kvd, d, inv(d)},
			{mod.TensorAttnV, kvd, d, inv(d)},
			{mod.TensorAttnOutput, d, qd, residual * inv(qd)},
			{mod.TensorFFNGate, s.NFF, d, inv(d)},
			{mod.TensorFFNUp, s.NFF, d, inv(d)},
			{mod.TensorFFNDown, d, s.NFF, residual * inv(s.NFF)},
		} {
			if err := b.matrix(bt(t.name), t.rows, t.cols, t.std); err != nil {
				return err
			}
		}
		for _, n := range []string{mod.TensorAttnNorm, mod.TensorFFNNorm} {
			if err := b.norm(bt(n)); err != nil {
				return err
			}
		}
		if b.o.Capacity > 0 && l%2 == 1 {
			if err := b.router(l); err != nil {
				return err
			}
		}
	}
	if err := b.norm(mod.TensorOutputNorm); err != nil {
		return err
	}
	return b.rows(mod.TensorOutput, d, s.NVocab, b.outputRow)
}

// rng is the random stream of one row of one tensor.
func (b *builder) rng(tensor string, row int) *rand.PCG {
	h := fnv.New64a()
	h.Write([]byte(tensor))
	return rand.NewPCG(b.o.Seed^h.Sum64(), uint64(row)*0x9E3779B97F4A7C15+1)
}

// matrixType is the type the matrix name with rows of cols is stored in:
// the scheme's, which falls back when cols is no whole number of its blocks
// (as llama.cpp's quantizer does, e.g. stories260k's nFF = 172 in Q8_0 is F16).
func (b *builder) matrixType(name string, cols int) gguf.TensorType {
	return b.scheme.TypeOf(name, cols, b.qm)
}

// matrix adds rows×cols weights drawn uniformly with standard deviation
// std, made straight in the stored type: quantized blocks get a scale and
// random quants, float types draw from a 4096-level table (fast enough for
// a 7B shape in seconds).
func (b *builder) matrix(name string, rows, cols int, std float64) error {
	t := b.matrixType(name, cols)
	a := math.Sqrt(3) * std // uniform on [-a, a] has this std
	var level [4096]float32
	for i := range level {
		level[i] = float32(a * ((float64(i)+0.5)/2048 - 1))
	}
	return b.w.AddTensorFunc(name, t, []uint64{uint64(cols), uint64(rows)}, func(dst []byte) error {
		rowBytes := len(dst) / rows
		return parallelRows(rows, func(r int) error {
			if err := fillRow(dst[r*rowBytes:(r+1)*rowBytes], t, a, &level, b.rng(name, r)); err != nil {
				return fmt.Errorf("synth: %s: %w", name, err)
			}
			return nil
		})
	})
}

// parallelRows calls fill for every row in [0, rows), the rows split among
// the CPUs (each row has its own random stream, so the result is the same),
// and returns the first error.
func parallelRows(rows int, fill func(r int) error) error {
	workers := min(runtime.GOMAXPROCS(0), rows)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := w; r < rows && errs[w] == nil; r += workers {
				errs[w] = fill(r)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func fillRow(dst []byte, t gguf.TensorType, a float64, level *[4096]float32, g *rand.PCG) error {
	switch t {
	case gguf.TypeF32, gguf.TypeF16:
		size := 4
		if t == gguf.TypeF16 {
			size = 2
		}
		var bits uint64
		for i, left := 0, 0; i < len(dst)/size; i++ {
			if left == 0 {
				bits, left = g.Uint64(), 5
			}
			v := level[bits&4095]
			bits, left = bits>>12, left-1
			if size == 4 {
				binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
			} else {
				binary.LittleEndian.PutUint16(dst[2*i:], gguf.F32ToF16(v))
			}
		}
	case gguf.TypeQ8_0: // blocks of a half scale and 32 int8 quants: value = q * scale
		scale := gguf.F32ToF16(float32(a / 127))
		for blk := dst; len(blk) >= 34; blk = blk[34:] {
			binary.LittleEndian.PutUint16(blk, scale)
			for j := 0; j < 4; j++ {
				binary.LittleEndian.PutUint64(blk[2+8*j:], g.Uint64())
			}
			for j := 2; j < 34; j++ {
				if blk[j] == 0x80 { // -128 is outside ggml's [-127, 127]
					blk[j] = 0x81
				}
			}
		}
	case gguf.TypeQ4_0: // blocks of a half scale and 32 4-bit quants: value = (q - 8) * scale
		// q - 8 is uniform on [-8, 7]: variance 21.25.
		scale := gguf.F32ToF16(float32(a / math.Sqrt(3) / math.Sqrt(21.25)))
		for blk := dst; len(blk) >= 18; blk = blk[18:] {
			binary.LittleEndian.PutUint16(blk, scale)
			binary.LittleEndian.PutUint64(blk[2:], g.Uint64())
			binary.LittleEndian.PutUint64(blk[10:], g.Uint64())
		}
	default: // the other quantized types: uniform values, quantized as ggml does
		v := make([]float32, len(dst)/t.BlockBytes()*t.BlockSize())
		for i := range v {
			v[i] = level[g.Uint64()&4095]
		}
		q, err := gguf.Quantize(t, v)
		if err != nil {
			return err
		}
		copy(dst, q)
	}
	return nil
}

// rows adds a [n][d] matrix made row by row from float32 rows, quantized
// to the model's type.
func (b *builder) rows(name string, d, n int, row func(i int, dst []float32)) error {
	t := b.matrixType(name, d)
	return b.w.AddTensorFunc(name, t, []uint64{uint64(d), uint64(n)}, func(dst []byte) error {
		rowBytes := len(dst) / n
		v := make([]float32, d)
		for i := 0; i < n; i++ {
			row(i, v)
			q, err := gguf.Quantize(t, v)
			if err != nil {
				return err
			}
			copy(dst[i*rowBytes:], q)
		}
		return nil
	})
}

// embeddingRow is token i's embedding: uniform with unit variance.
func (b *builder) embeddingRow(i int, dst []float32) {
	b.uniform(dst, mod.TensorTokenEmbd, i, 1)
}

// outputRow j is the embedding of the token whose greedy successor is j,
// over sqrt(nEmbd); zero for a token that succeeds none (</s>, <unk>).
func (b *builder) outputRow(j int, dst []float32) {
	clear(dst)
	if t := b.prev[j]; t >= 0 {
		b.embeddingRow(int(t), dst)
		s := float32(1 / math.Sqrt(float64(len(dst))))
		for i := range dst {
			dst[i] *= s
		}
	}
}

// norm adds an RMSNorm weight, 1 ± normJitter.
func (b *builder) norm(name string) error {
	v := make([]float32, b.s.NEmbd)
	b.uniform(v, name, 0, normJitter/math.Sqrt(3))
	for i := range v {
		v[i]++
	}
	return b.w.AddFloat32(name, gguf.TypeF32, []uint64{uint64(len(v))}, v)
}

// cycle is a random cyclic permutation (Sattolo's algorithm) through every
// token but </s> and <unk>, as successor[token]; those two get -1.
func cycle(n int, g *rand.PCG) []int32 {
	members := []int32{tokBOS}
	for t := tokByte0; t < n; t++ {
		members = append(members, int32(t))
	}
	r := rand.New(g)
	for i := len(members) - 1; i > 0; i-- {
		j := r.IntN(i)
		members[i], members[j] = members[j], members[i]
	}
	next := make([]int32, n)
	next[tokUnk], next[tokEOS] = -1, -1
	for i, t := range members {
		next[t] = members[(i+1)%len(members)]
	}
	return next
}

// router adds routed block l's router and predictor. The predictor is
// built so that calibration can set its threshold although it has no bias:
// hidden units 0 and 1 are SiLU(±w·x), whose difference is w·x exactly,
// and the others SiLU(v_j·x) for random v_j, whose mean c(x) > 0 grows with
// |x|. With down weights [1, -1, -β/(h-2), ...], p = w·x - β c(x), and
// calibration picks β (and the router's bias) from the layer's inputs.
func (b *builder) router(l int) error {
	d, h := b.s.NEmbd, b.s.NEmbd/2
	bt := func(n string) string { return mod.BlockTensor(l, n) }
	w := make([]float32, d)
	b.uniform(w, bt(mod.TensorRouterWeight), 0, 1/math.Sqrt(float64(d)))
	up := make([]float32, h*d) // [h][d]
	copy(up, w)
	for i := range w {
		up[d+i] = -w[i]
	}
	for j := 2; j < h; j++ {
		b.uniform(up[j*d:(j+1)*d], bt(mod.TensorPredUp), j, 1/math.Sqrt(float64(d)))
	}
	down := make([]float32, h)
	down[0], down[1] = 1, -1
	for _, t := range []struct {
		name string
		dims []uint64
		v    []float32
	}{
		{mod.TensorRouterWeight, []uint64{uint64(d)}, w},
		{mod.TensorRouterBias, []uint64{1}, []float32{0}},
		{mod.TensorPredUp, []uint64{uint64(d), uint64(h)}, up},
		{mod.TensorPredDown, []uint64{uint64(h)}, down},
	} {
		if err := b.w.AddFloat32(bt(t.name), gguf.TypeF32, t.dims, t.v); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
	}
	return nil
}

// uniform fills v with uniform values of standard deviation std, from the
// stream of row `row` of tensor name.
func (b *builder) uniform(v []float32, name string, row int, std float64) {
	g, a := b.rng(name, row), math.Sqrt(3)*std
	for i := range v {
		v[i] = float32(a * (2*float64(g.Uint64()>>11)/(1<<53) - 1))
	}
}
