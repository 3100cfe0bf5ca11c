package convert

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/quant"
)

// ErrMetaMoDLayout marks a checkpoint of the public MoD Llama 2 implementation
// (sramshetty/mixture-of-depths), which modrun refuses: see metaMoDReason.
var ErrMetaMoDLayout = errors.New("checkpoint of the public MoD Llama 2 implementation")

// metaMoDReason says why that layout is refused rather than converted: the
// weights would load, but the model they were trained in computes something
// other than DESIGN.md §3, so our forward pass would not reproduce it.
const metaMoDReason = `it has one router.weight shared by every routed block (and aux_router.0/2 as its causal predictor), and its routed block computes something else than modrun's (DESIGN.md §3):
  - it scales only the MLP output by sigmoid(r); modrun scales the whole block, attention and MLP: x + g(r)*f(x);
  - it adds the residual twice: the block output h + MLP (h already holds x) is scatter_add-ed onto x, so a selected token becomes 2x + attn + sigmoid(r)*mlp;
  - it applies RoPE at compact positions 0..k-1 of the selected tokens; modrun rotates each token at its original position.
Its weights would load but would not compute what they were trained to, so modrun does not convert them`

// metaMoDNames match that layout's tensors: the shared router (saved once at
// the top and again under every layer that holds it) and the aux router.
var metaMoDNames = regexp.MustCompile(`^(layers\.\d+\.)?(router\.weight|aux_router\.\d+\.weight)$`)

// CheckLayout fails with ErrMetaMoDLayout when the checkpoint has the layout
// of the public MoD Llama 2 implementation.
func CheckLayout(ck *Checkpoint) error {
	for _, name := range ck.Names() {
		if metaMoDNames.MatchString(name) {
			return fmt.Errorf("%s: tensor %q: %w: %s", ck.Path, name, ErrMetaMoDLayout, metaMoDReason)
		}
	}
	return nil
}

// Options controls the output file.
type Options struct {
	Scheme quant.Scheme // the weight matrices' types (quant.Parse); norms and MoD tensors stay F32
	Name   string       // general.name
}

// blockNames maps Meta's per-block names to GGUF's.
var blockNames = []struct{ meta, gguf string }{
	{"attention_norm.weight", mod.TensorAttnNorm},
	{"attention.wq.weight", mod.TensorAttnQ},
	{"attention.wk.weight", mod.TensorAttnK},
	{"attention.wv.weight", mod.TensorAttnV},
	{"attention.wo.weight", mod.TensorAttnOutput},
	{"ffn_norm.weight", mod.TensorFFNNorm},
	{"feed_forward.w1.weight", mod.TensorFFNGate},
	{"feed_forward.w3.weight", mod.TensorFFNUp},
	{"feed_forward.w2.weight", mod.TensorFFNDown},
}

// Convert builds the GGUF of a checkpoint: arch "llama" when cfg routes no
// layer (a plain llama file), else "llama-mod". The tokenizer.* metadata is
// copied from vocab. Every tensor of the checkpoint must be used and every
// expected one present with the shape cfg implies.
func Convert(ck *Checkpoint, cfg *Config, vocab *gguf.File, opts Options) (*gguf.Writer, error) {
	if opts.Scheme.IsZero() {
		return nil, fmt.Errorf("no output type: want one of %s", quant.Names())
	}
	if err := CheckLayout(ck); err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c := &converter{ck: ck, cfg: cfg, scheme: opts.Scheme, w: gguf.NewWriter(), used: map[string]bool{}}
	c.arch = mod.ArchLlama
	if len(cfg.RoutedLayers) > 0 {
		c.arch = mod.ArchMoD
	}
	if err := c.metadata(opts.Name, vocab); err != nil {
		return nil, err
	}
	if err := c.tensors(); err != nil {
		return nil, err
	}
	for _, name := range ck.Names() {
		if !c.used[name] {
			return nil, fmt.Errorf("%s: tensor %q is not part of the model the config describes (%s, routed layers %v, predictor_hidden %d, router_bias %v)",
				ck.Path, name, c.arch, cfg.RoutedLayers, cfg.PredictorHidden, cfg.RouterBias)
		}
	}
	return c.w, nil
}

type converter struct {
	ck     *Checkpoint
	cfg    *Config
	arch   string
	scheme quant.Scheme
	w      *gguf.Writer
	used   map[string]bool
}

type keyValue struct {
	key string
	v   gguf.Value
}

func (c *converter) metadata(name string, vocab *gguf.File) error {
	cfg := c.cfg
	if name == "" {
		name = c.arch
	}
	ak := func(k string) string { return mod.ArchKey(c.arch, k) }
	kvs := []keyValue{
		{mod.KeyArchitecture, gguf.Scalar(c.arch)},
		{mod.KeyName, gguf.Scalar(name)},
		{mod.KeyFileType, gguf.Scalar(c.scheme.FileType())},
		{ak(mod.KeyContextLength), gguf.Scalar(uint32(cfg.MaxSeqLen))},
		{ak(mod.KeyEmbeddingLen), gguf.Scalar(uint32(cfg.Dim))},
		{ak(mod.KeyBlockCount), gguf.Scalar(uint32(cfg.NLayers))},
		{ak(mod.KeyFeedForwardLen), gguf.Scalar(uint32(cfg.FFNDim))},
		{ak(mod.KeyHeadCount), gguf.Scalar(uint32(cfg.NHeads))},
		{ak(mod.KeyHeadCountKV), gguf.Scalar(uint32(cfg.NKVHeads))},
		{ak(mod.KeyRMSEpsilon), gguf.Scalar(float32(cfg.NormEps))},
		{ak(mod.KeyRopeFreqBase), gguf.Scalar(float32(cfg.RopeBase))},
		{ak(mod.KeyRopeDimCount), gguf.Scalar(uint32(cfg.HeadDim()))},
		{ak(mod.KeyVocabSize), gguf.Scalar(uint32(cfg.VocabSize))},
	}
	if c.arch == mod.ArchMoD {
		routed := make([]uint32, len(cfg.RoutedLayers))
		for i, l := range cfg.RoutedLayers {
			routed[i] = uint32(l)
		}
		kvs = append(kvs,
			keyValue{ak(mod.KeyRoutedLayers), gguf.Array(routed)},
			keyValue{ak(mod.KeyCapacity), gguf.Scalar(float32(cfg.Capacity))},
			keyValue{ak(mod.KeyGate), gguf.Scalar(cfg.Gate)},
			keyValue{ak(mod.KeyPredictorHidden), gguf.Scalar(uint32(cfg.PredictorHidden))})
	}
	for _, kv := range kvs {
		if err := c.w.SetKV(kv.key, kv.v); err != nil {
			return err
		}
	}
	return c.copyTokenizer(vocab)
}

// copyTokenizer copies every tokenizer.* key of the vocabulary file, after
// checking that its token count is the model's vocab_size.
func (c *converter) copyTokenizer(vocab *gguf.File) error {
	tokens, err := vocab.Strings("tokenizer.ggml.tokens")
	if err != nil {
		return fmt.Errorf("vocab %s: %w", vocab.Path, err)
	}
	if len(tokens) != c.cfg.VocabSize {
		return fmt.Errorf("vocab %s has %d tokens, the model's vocab_size is %d", vocab.Path, len(tokens), c.cfg.VocabSize)
	}
	for _, kv := range vocab.KeysWithPrefix("tokenizer.") {
		if err := c.w.SetKV(kv.Key, kv.Value); err != nil {
			return fmt.Errorf("vocab %s: %w", vocab.Path, err)
		}
	}
	return nil
}

func (c *converter) tensors() error {
	cfg := c.cfg
	d, v, ff, hd := cfg.Dim, cfg.VocabSize, cfg.FFNDim, cfg.HeadDim()
	if err := c.matrix("tok_embeddings.weight", mod.TensorTokenEmbd, v, d); err != nil {
		return err
	}
	if err := c.vector("norm.weight", mod.TensorOutputNorm, d); err != nil {
		return err
	}
	if err := c.output(); err != nil {
		return err
	}
	for i := 0; i < cfg.NLayers; i++ {
		rows := map[string]int{ // [out, in] of each block tensor
			mod.TensorAttnQ: cfg.NHeads * hd, mod.TensorAttnK: cfg.NKVHeads * hd, mod.TensorAttnV: cfg.NKVHeads * hd,
			mod.TensorAttnOutput: d, mod.TensorFFNGate: ff, mod.TensorFFNUp: ff, mod.TensorFFNDown: d,
		}
		cols := map[string]int{mod.TensorAttnOutput: cfg.NHeads * hd, mod.TensorFFNDown: ff}
		for _, bn := range blockNames {
			src, dst := fmt.Sprintf("layers.%d.%s", i, bn.meta), mod.BlockTensor(i, bn.gguf)
			var err error
			if bn.gguf == mod.TensorAttnNorm || bn.gguf == mod.TensorFFNNorm {
				err = c.vector(src, dst, d)
			} else {
				in := d
				if n, ok := cols[bn.gguf]; ok {
					in = n
				}
				err = c.matrix(src, dst, rows[bn.gguf], in)
			}
			if err != nil {
				return err
			}
		}
		if cfg.routed(i) {
			if err := c.modTensors(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// output writes output.weight, or leaves it out when the output is tied to
// the embedding (llama.cpp then reuses token_embd).
func (c *converter) output() error {
	const name = "output.weight"
	if !c.cfg.TiedOutput {
		return c.matrix(name, mod.TensorOutput, c.cfg.VocabSize, c.cfg.Dim)
	}
	if t, ok := c.ck.Tensors[name]; ok { // a tied state_dict may hold the shared matrix twice
		emb := c.ck.Tensors["tok_embeddings.weight"]
		if !equalData(t, emb) {
			return fmt.Errorf("%s: tensor %q differs from tok_embeddings.weight, but the config says tied_output", c.ck.Path, name)
		}
		c.used[name] = true
	}
	return nil
}

func (c *converter) modTensors(i int) error {
	cfg := c.cfg
	pre := fmt.Sprintf("layers.%d.", i)
	if err := c.vector(pre+"mod_router.weight", mod.BlockTensor(i, mod.TensorRouterWeight), cfg.Dim); err != nil {
		return err
	}
	if cfg.RouterBias {
		if err := c.vector(pre+"mod_router.bias", mod.BlockTensor(i, mod.TensorRouterBias), 1); err != nil {
			return err
		}
	}
	if cfg.PredictorHidden == 0 {
		return nil
	}
	h := cfg.PredictorHidden
	if err := c.add(pre+"mod_pred_up.weight", mod.BlockTensor(i, mod.TensorPredUp), []int{h, cfg.Dim}, gguf.TypeF32); err != nil {
		return err
	}
	// Linear(h, 1).weight is [1, h]; a plain vector [h] is accepted too.
	down := pre + "mod_pred_down.weight"
	if t, ok := c.ck.Tensors[down]; ok && len(t.Shape) == 1 {
		return c.vector(down, mod.BlockTensor(i, mod.TensorPredDown), h)
	}
	return c.addAs(down, mod.BlockTensor(i, mod.TensorPredDown), []int{1, h}, []uint64{uint64(h)}, gguf.TypeF32)
}

// matrix adds a weight matrix [out, in] (PyTorch) = GGUF dims [in, out], in
// the type the scheme gives it: a quantized type needs rows that are whole
// blocks, so a matrix whose rows are not falls back (as llama.cpp's
// quantizer does: to a type of smaller blocks, else F16).
func (c *converter) matrix(src, dst string, out, in int) error {
	cfg := c.cfg
	m := quant.Model{NLayer: cfg.NLayers, NHead: cfg.NHeads, NKVHead: cfg.NKVHeads, TiedOutput: cfg.TiedOutput}
	return c.add(src, dst, []int{out, in}, c.scheme.TypeOf(dst, in, m))
}

// vector adds a 1-D tensor; always F32.
func (c *converter) vector(src, dst string, n int) error {
	return c.add(src, dst, []int{n}, gguf.TypeF32)
}

func (c *converter) add(src, dst string, shape []int, t gguf.TensorType) error {
	dims := make([]uint64, len(shape)) // ggml order: the reverse of PyTorch's
	for i, s := range shape {
		dims[len(shape)-1-i] = uint64(s)
	}
	return c.addAs(src, dst, shape, dims, t)
}

func (c *converter) addAs(src, dst string, shape []int, dims []uint64, t gguf.TensorType) error {
	tensor, ok := c.ck.Tensors[src]
	if !ok {
		return fmt.Errorf("%s: tensor %q is missing (wanted for %s)", c.ck.Path, src, dst)
	}
	if !sameShape(tensor.Shape, shape) {
		return fmt.Errorf("%s: tensor %q has shape %v, the config implies %v", c.ck.Path, src, tensor.Shape, shape)
	}
	c.used[src] = true
	if err := c.w.AddFloat32(dst, t, dims, tensor.Data); err != nil {
		return fmt.Errorf("%s: tensor %q: %w", c.ck.Path, src, err)
	}
	return nil
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalData(a, b *Tensor) bool {
	if a == nil || b == nil || !sameShape(a.Shape, b.Shape) {
		return false
	}
	for i := range a.Data {
		if a.Data[i] != b.Data[i] {
			return false
		}
	}
	return true
}
