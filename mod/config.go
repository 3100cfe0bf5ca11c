package mod

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/modrun/modrun/gguf"
)

// Config is a model's shape and routing, read from GGUF metadata.
type Config struct {
	Arch       string  // ArchLlama or ArchMoD
	NVocab     int     // tokens in the vocabulary
	NEmbd      int     // width of the residual stream
	NLayer     int     // blocks
	NHead      int     // query heads
	NKVHead    int     // key/value heads (GQA: NHead is a multiple)
	HeadDim    int     // NEmbd / NHead
	NFF        int     // hidden width of the SwiGLU MLP
	ContextLen int     // longest sequence the model takes
	RMSEps     float32 // RMSNorm epsilon
	RopeBase   float32 // RoPE frequency base
	RopeScale  float32 // linear RoPE scaling: frequencies are divided by it; 0 (or 1) = none

	// Mixture-of-Depths (DESIGN.md §3); empty for a dense model.
	Routed          []bool  // [NLayer] whether block l has a router
	Capacity        float32 // fraction of a sequence routed in top-k (eval) mode
	Gate            string  // GateSigmoid or GateIdentity
	PredictorHidden int     // hidden width of the causal predictor; 0 = none

	// What a routed block computes (the mod.* semantics keys, names.go).
	// A file without those keys gets DESIGN.md §3: "block", "original",
	// "ceil", a predictor by predictor_hidden, causal routing by router.
	GateTarget       string  // GateTargetBlock, GateTargetMLP or GateTargetOutput
	Positions        string  // PositionsOriginal or PositionsCompact
	CapacityTokens   int     // > 0: top-k takes min(n, CapacityTokens) tokens, not a fraction
	CapacityRounding string  // RoundingCeil or RoundingFloor, for the fraction
	RouterBias       *bool   // whether every router has a bias; nil = each may or may not
	Predictor        string  // PredictorNone, PredictorMLP or PredictorLinear
	CausalRouting    Routing // RoutingRouter or RoutingPredictor: what causal routing was trained for
}

// HasPredictor reports whether the routed blocks carry a causal predictor.
func (c Config) HasPredictor() bool {
	return c.Predictor == PredictorMLP || c.Predictor == PredictorLinear
}

// Semantics names how the routed blocks differ from DESIGN.md §3, one
// "key = value" per difference; empty for §3 exactly (and for dense models).
func (c Config) Semantics() []string {
	var out []string
	differs := func(key, v, def string) {
		if v != "" && v != def {
			out = append(out, fmt.Sprintf("%s = %s", key, v))
		}
	}
	differs(KeyGateTarget, c.GateTarget, GateTargetBlock)
	differs(KeyPositions, c.Positions, PositionsOriginal)
	differs(KeyCapacityRounding, c.CapacityRounding, RoundingCeil)
	differs(KeyPredictor, c.Predictor, PredictorMLP)
	if c.Predictor == PredictorNone {
		out = out[:len(out)-1]
	}
	if c.CapacityTokens > 0 {
		out = append(out, fmt.Sprintf("%s = %d", KeyCapacityTokens, c.CapacityTokens))
	}
	return out
}

// TopKCount is the number of tokens a routed block takes from a sequence of
// n in top-k (eval) mode, by the file's capacity rule; it may be 0 with
// the floor rounding.
func (c Config) TopKCount(n int) int {
	switch {
	case c.CapacityTokens > 0:
		return min(n, c.CapacityTokens)
	case c.CapacityRounding == RoundingFloor:
		return min(n, int(math.Floor(float64(c.Capacity)*float64(n))))
	}
	return TopK(c.Capacity, n)
}

// Hard limits that keep a hostile header from asking for absurd buffers.
const (
	maxDim     = 1 << 16
	maxLayers  = 1 << 10
	maxContext = 1 << 20
)

// KVDim is the width of one token's keys (and values) in one layer.
func (c Config) KVDim() int { return c.NKVHead * c.HeadDim }

// IsMoD reports whether any block is routed.
func (c Config) IsMoD() bool {
	for _, r := range c.Routed {
		if r {
			return true
		}
	}
	return false
}

// RoutedLayers lists the routed blocks in order.
func (c Config) RoutedLayers() []int {
	var out []int
	for l, r := range c.Routed {
		if r {
			out = append(out, l)
		}
	}
	return out
}

// ConfigFromGGUF reads and checks the configuration of a "llama" or
// "llama-mod" file. Every error names the key that is wrong.
func ConfigFromGGUF(f *gguf.File) (Config, error) {
	c := Config{Arch: f.Architecture()}
	if c.Arch != ArchLlama && c.Arch != ArchMoD {
		return c, fmt.Errorf("mod: %s: architecture %q is not %q or %q", f.Path, c.Arch, ArchLlama, ArchMoD)
	}
	r := &metaReader{f: f, arch: c.Arch}
	c.NEmbd = r.int(KeyEmbeddingLen, 1, maxDim)
	c.NLayer = r.int(KeyBlockCount, 1, maxLayers)
	c.NFF = r.int(KeyFeedForwardLen, 1, 1<<20)
	c.NHead = r.int(KeyHeadCount, 1, maxDim)
	c.NKVHead = r.intOr(KeyHeadCountKV, c.NHead, 1, maxDim)
	c.ContextLen = r.int(KeyContextLength, 1, maxContext)
	c.RMSEps = r.float(KeyRMSEpsilon, 1e-5)
	c.RopeBase = r.float(KeyRopeFreqBase, 10000)
	if r.err != nil {
		return c, r.err
	}
	if c.NEmbd%c.NHead != 0 {
		return c, fmt.Errorf("mod: %s: %s = %d is not a multiple of %s = %d", f.Path, r.key(KeyEmbeddingLen), c.NEmbd, r.key(KeyHeadCount), c.NHead)
	}
	c.HeadDim = c.NEmbd / c.NHead
	if c.NHead%c.NKVHead != 0 {
		return c, fmt.Errorf("mod: %s: %s = %d is not a multiple of %s = %d", f.Path, r.key(KeyHeadCount), c.NHead, r.key(KeyHeadCountKV), c.NKVHead)
	}
	if c.HeadDim%2 != 0 {
		return c, fmt.Errorf("mod: %s: head dimension %d is odd; RoPE rotates pairs", f.Path, c.HeadDim)
	}
	if rd := r.intOr(KeyRopeDimCount, c.HeadDim, 0, maxDim); r.err == nil && rd != c.HeadDim {
		// Either key may be the wrong one: name both.
		return c, fmt.Errorf("mod: %s: %s = %d, but the head dimension is %d (%s %d / %s %d): a wrong head count, or RoPE over part of the head, which is not supported",
			f.Path, r.key(KeyRopeDimCount), rd, c.HeadDim, r.key(KeyEmbeddingLen), c.NEmbd, r.key(KeyHeadCount), c.NHead)
	}
	if !(c.RMSEps > 0) || !(c.RopeBase > 1) {
		return c, fmt.Errorf("mod: %s: %s = %g and %s = %g must be positive (and the base above 1)", f.Path, r.key(KeyRMSEpsilon), c.RMSEps, r.key(KeyRopeFreqBase), c.RopeBase)
	}
	if err := readRopeScaling(&c, r); err != nil {
		return c, err
	}
	var err error
	if c.NVocab, err = vocabSize(f, r); err != nil {
		return c, err
	}
	c.Routed = make([]bool, c.NLayer)
	if c.Arch == ArchMoD {
		if err := readMoD(&c, r); err != nil {
			return c, err
		}
	}
	return c, r.err
}

// readRopeScaling reads rope.scaling.* as llama.cpp does for a llama
// model: the type defaults to "linear", whose factor (rope.scaling.factor,
// else the older rope.scale_linear; absent or 0: none) divides every
// frequency; "none" ignores the factor. YaRN and LongRoPE mix or replace
// frequencies per pair and scale the rotated vectors, which modrun does not
// do: refused, as is an attention factor other than 1 (it would scale them).
func readRopeScaling(c *Config, r *metaReader) error {
	f := r.f
	typ := RopeScalingLinear
	if f.Has(r.key(KeyRopeScalingType)) {
		var err error
		if typ, err = f.String(r.key(KeyRopeScalingType)); err != nil {
			return fmt.Errorf("mod: %w", err)
		}
	}
	if typ != RopeScalingNone && typ != RopeScalingLinear {
		return fmt.Errorf("mod: %s: %s = %q is not supported (%q and %q are)", f.Path, r.key(KeyRopeScalingType), typ, RopeScalingNone, RopeScalingLinear)
	}
	key := KeyRopeScalingFactor
	if !f.Has(r.key(key)) {
		key = KeyRopeScaleLinear
	}
	factor := r.float(key, 0)
	if attn := r.float(KeyRopeScalingAttnFactor, 1); r.err == nil && attn != 1 {
		return fmt.Errorf("mod: %s: %s = %g is not supported (only 1)", f.Path, r.key(KeyRopeScalingAttnFactor), attn)
	}
	if r.err != nil {
		return r.err
	}
	if factor < 0 {
		return fmt.Errorf("mod: %s: %s = %g is negative", f.Path, r.key(key), factor)
	}
	if typ == RopeScalingLinear {
		c.RopeScale = factor
	}
	return nil
}

// vocabSize is the length of the embedded vocabulary, else llama.vocab_size,
// else the token embedding's row count. Where the vocabulary and the key
// both exist they must agree (the token embedding's shape is checked against
// the result when the weights load).
func vocabSize(f *gguf.File, r *metaReader) (int, error) {
	key := -1
	if f.Has(r.key(KeyVocabSize)) {
		if key = r.int(KeyVocabSize, 1, 1<<24); r.err != nil {
			return 0, r.err
		}
	}
	if tokens, err := f.Strings("tokenizer.ggml.tokens"); err == nil {
		if key >= 0 && key != len(tokens) {
			return 0, fmt.Errorf("mod: %s: %s = %d, but tokenizer.ggml.tokens has %d tokens", f.Path, r.key(KeyVocabSize), key, len(tokens))
		}
		return len(tokens), nil
	}
	if key >= 0 {
		return key, nil
	}
	if t, ok := f.Tensor(TensorTokenEmbd); ok && len(t.Dims) == 2 {
		return int(t.Dims[1]), nil
	}
	return 0, fmt.Errorf("mod: %s: no vocabulary size: none of tokenizer.ggml.tokens, %s, %s", f.Path, r.key(KeyVocabSize), TensorTokenEmbd)
}

func readMoD(c *Config, r *metaReader) error {
	f := r.f
	layers, err := routedLayers(f, r.key(KeyRoutedLayers))
	if err != nil {
		return err
	}
	for _, l := range layers {
		if l < 0 || l >= int64(c.NLayer) || c.Routed[l] {
			return fmt.Errorf("mod: %s: %s: layer %d is out of range [0, %d) or listed twice", f.Path, r.key(KeyRoutedLayers), l, c.NLayer)
		}
		c.Routed[l] = true
	}
	c.Capacity = r.float(KeyCapacity, 0.125)
	if r.err == nil && !(c.Capacity > 0 && c.Capacity <= 1) {
		return fmt.Errorf("mod: %s: %s = %g is not in (0, 1]", f.Path, r.key(KeyCapacity), c.Capacity)
	}
	c.Gate = GateSigmoid
	if f.Has(r.key(KeyGate)) {
		if c.Gate, err = f.String(r.key(KeyGate)); err != nil {
			return fmt.Errorf("mod: %w", err)
		}
	}
	if c.Gate != GateSigmoid && c.Gate != GateIdentity {
		return fmt.Errorf("mod: %s: %s = %q is not %q or %q", f.Path, r.key(KeyGate), c.Gate, GateSigmoid, GateIdentity)
	}
	c.PredictorHidden = r.intOr(KeyPredictorHidden, 0, 0, maxDim)
	if r.err != nil {
		return r.err
	}
	return readSemantics(c, r)
}

// readSemantics reads the keys that declare how a routed block computes;
// each absent key takes its DESIGN.md §3 value.
func readSemantics(c *Config, r *metaReader) error {
	var err error
	if c.GateTarget, err = r.choice(KeyGateTarget, GateTargetBlock, GateTargetBlock, GateTargetMLP, GateTargetOutput); err != nil {
		return err
	}
	if c.Positions, err = r.choice(KeyPositions, PositionsOriginal, PositionsOriginal, PositionsCompact); err != nil {
		return err
	}
	if c.CapacityRounding, err = r.choice(KeyCapacityRounding, RoundingCeil, RoundingCeil, RoundingFloor); err != nil {
		return err
	}
	c.CapacityTokens = r.intOr(KeyCapacityTokens, 0, 1, maxContext)
	if r.f.Has(r.key(KeyRouterBias)) {
		b, err := r.f.Bool(r.key(KeyRouterBias))
		if err != nil {
			return fmt.Errorf("mod: %w", err)
		}
		c.RouterBias = &b
	}
	predDefault := PredictorNone
	if c.PredictorHidden > 0 {
		predDefault = PredictorMLP
	}
	if c.Predictor, err = r.choice(KeyPredictor, predDefault, PredictorNone, PredictorMLP, PredictorLinear); err != nil {
		return err
	}
	if (c.Predictor == PredictorMLP) != (c.PredictorHidden > 0) {
		return fmt.Errorf("mod: %s: %s = %q but %s = %d: an MLP predictor needs a hidden width, and only it has one",
			r.f.Path, r.key(KeyPredictor), c.Predictor, r.key(KeyPredictorHidden), c.PredictorHidden)
	}
	causal, err := r.choice(KeyCausalRouting, RoutingRouter.String(), RoutingRouter.String(), RoutingPredictor.String())
	if err != nil {
		return err
	}
	c.CausalRouting, _ = ParseRouting(causal)
	if c.CausalRouting == RoutingPredictor && !c.HasPredictor() {
		return fmt.Errorf("mod: %s: %s = %q, but the model has no predictor (%s = %q)", r.f.Path, r.key(KeyCausalRouting), causal, r.key(KeyPredictor), c.Predictor)
	}
	return r.err
}

// routedLayers reads the routed layer indices, an array of u32 (as modrun
// writes it) or of i32 (as llama.cpp's gguf-py writes a Python list of
// ints); the caller checks that each is a layer.
func routedLayers(f *gguf.File, key string) ([]int64, error) {
	v, ok := f.Lookup(key)
	if !ok {
		_, err := f.Uint32s(key) // gguf's "key not found", naming the file and key
		return nil, fmt.Errorf("mod: %w", err)
	}
	var out []int64
	switch a := v.Interface().(type) {
	case []uint32:
		for _, l := range a {
			out = append(out, int64(l))
		}
	case []int32:
		for _, l := range a {
			out = append(out, int64(l))
		}
	default:
		typ := v.Type().String()
		if v.Type() == gguf.TypeArray {
			typ += " of " + v.ElemType().String()
		}
		return nil, fmt.Errorf("mod: %s: %s has type %s; want an array of u32 or i32", f.Path, key, typ)
	}
	return out, nil
}

// metaReader reads hyperparameters under the architecture's prefix and keeps
// the first error, so the reads above stay one line each.
type metaReader struct {
	f    *gguf.File
	arch string
	err  error
}

func (r *metaReader) key(k string) string { return ArchKey(r.arch, k) }

func (r *metaReader) int(k string, lo, hi int) int {
	if r.err != nil {
		return 0
	}
	v, err := r.f.Uint(r.key(k))
	if err != nil {
		r.err = fmt.Errorf("mod: %w", err)
		return 0
	}
	if v < uint64(lo) || v > uint64(hi) {
		r.err = fmt.Errorf("mod: %s: %s = %d is not in [%d, %d]", r.f.Path, r.key(k), v, lo, hi)
		return 0
	}
	return int(v)
}

func (r *metaReader) intOr(k string, def, lo, hi int) int {
	if r.err != nil || !r.f.Has(r.key(k)) {
		return def
	}
	return r.int(k, lo, hi)
}

// choice reads a string key that must be one of allowed; absent gives def.
func (r *metaReader) choice(k, def string, allowed ...string) (string, error) {
	if r.err != nil || !r.f.Has(r.key(k)) {
		return def, r.err
	}
	v, err := r.f.String(r.key(k))
	if err != nil {
		return "", fmt.Errorf("mod: %w", err)
	}
	for _, a := range allowed {
		if v == a {
			return v, nil
		}
	}
	return "", fmt.Errorf("mod: %s: %s = %q is not one of %s", r.f.Path, r.key(k), v, strings.Join(allowed, ", "))
}

func (r *metaReader) float(k string, def float32) float32 {
	if r.err != nil {
		return 0
	}
	v, err := r.f.Float(r.key(k))
	if errors.Is(err, gguf.ErrKeyNotFound) {
		return def
	}
	if err != nil {
		r.err = fmt.Errorf("mod: %w", err)
		return 0
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		r.err = fmt.Errorf("mod: %s: %s is %g", r.f.Path, r.key(k), v)
		return 0
	}
	return float32(v)
}
