package convert

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/modrun/modrun/mod"
)

// Layout names a checkpoint's layout: whose names and semantics it has.
type Layout string

const (
	LayoutModrun    Layout = "modrun"     // train/modllama.py: our names, DESIGN.md §3
	LayoutMetaLlama Layout = "meta-llama" // a dense Llama under Meta's names, params.json
	LayoutMoDLlama2 Layout = "mod-llama2" // github sramshetty/mixture-of-depths ("MoD Llama 2")
	LayoutMixtureAI Layout = "mixture-ai" // github Mixture-AI/Mixture-of-Depths, wrapping Meta or HF blocks
	LayoutHFLlama   Layout = "hf-llama"   // a dense Hugging Face Llama, config.json
)

// Semantics is how a layout's routed blocks compute, written as the
// mod.* semantics keys (mod/names.go); nil for DESIGN.md §3.
type Semantics struct {
	GateTarget       string // mod.GateTarget*
	Positions        string // mod.Positions*
	CapacityTokens   int    // > 0: top-k takes min(n, CapacityTokens)
	CapacityRounding string // mod.Rounding*
	Predictor        string // mod.Predictor*
	CausalRouting    string // "router" | "predictor"
}

// Source is a checkpoint in modrun's own layout, whatever layout it came in:
// tensors under train/modllama.py's names, and the Config that describes
// them, for Convert.
type Source struct {
	Layout      Layout
	Description string // what was found, for the user: "MoD Llama 2 (sramshetty/mixture-of-depths), aux router"
	Checkpoint  *Checkpoint
	Config      *Config
}

// Load reads a checkpoint and its config file (train/'s JSON, a Meta
// params.json or a Hugging Face config.json, taken as it is), detects the
// layout, and brings it to modrun's names. A checkpoint that matches no
// layout is an error naming the tensors that do not fit.
func Load(ckptPath, configPath string) (*Source, error) {
	ck, err := LoadCheckpoint(ckptPath)
	if err != nil {
		return nil, err
	}
	raw, err := readConfigJSON(configPath)
	if err != nil {
		return nil, err
	}
	src, err := adapt(ck, raw)
	if err != nil {
		return nil, fmt.Errorf("%s (config %s): %w", ckptPath, configPath, err)
	}
	return src, nil
}

var (
	modLlama2Names = regexp.MustCompile(`^(layers\.\d+\.)?(router\.weight|aux_router\.[02]\.weight)$`)
	wrapperNames   = regexp.MustCompile(`\.(router_mlp|aux_mlp|transformer_block)\.`)
)

// derivedNames are tensors some trainers save that hold no weights, only
// what RoPE computes from the config: Meta's rope.freqs, HF's inv_freq.
var derivedNames = regexp.MustCompile(`^rope\.freqs$|(^|\.)rotary_emb\.inv_freq$`)

// wrapperPrefixes are what nn.DataParallel ("module.") and torch.compile
// ("_orig_mod.") put before every name of a state_dict saved through them.
var wrapperPrefixes = []string{"module.", "_orig_mod."}

// unwrap drops a prefix that every tensor name shares.
func unwrap(ck *Checkpoint) *Checkpoint {
	for _, pre := range wrapperPrefixes {
		all := len(ck.Tensors) > 0
		for n := range ck.Tensors {
			all = all && strings.HasPrefix(n, pre)
		}
		if all {
			out := &Checkpoint{Path: ck.Path, Tensors: map[string]*Tensor{}}
			for n, t := range ck.Tensors {
				out.Tensors[strings.TrimPrefix(n, pre)] = t
			}
			return unwrap(out)
		}
	}
	return ck
}

// adapt detects the layout from the tensor names and the config's kind.
func adapt(ck *Checkpoint, raw jsonObject) (*Source, error) {
	ck = unwrap(ck)
	var modLlama2, wrapper, hf bool
	for _, n := range ck.Names() {
		if derivedNames.MatchString(n) {
			continue
		}
		modLlama2 = modLlama2 || modLlama2Names.MatchString(n)
		wrapper = wrapper || wrapperNames.MatchString(n)
		hf = hf || strings.HasPrefix(n, "model.")
	}
	kind := raw.kind()
	switch {
	case kind == configModrun:
		cfg, err := parseModrunConfig(raw)
		if err != nil {
			return nil, err
		}
		return &Source{Layout: LayoutModrun, Description: "modrun (train/modllama.py)", Checkpoint: ck, Config: cfg}, nil
	case modLlama2 && kind == configMeta:
		return adaptMoDLlama2(ck, raw)
	case wrapper:
		return adaptWrapper(ck, raw, hf, kind)
	case hf && kind == configHF:
		return adaptPlain(ck, raw, true, kind)
	case !hf && kind == configMeta:
		return adaptPlain(ck, raw, false, kind)
	}
	return nil, fmt.Errorf("no known layout has %s tensors with a %s config (layouts: %s, %s, %s, %s, %s)",
		map[bool]string{true: "Hugging Face (model.*)", false: "Meta (layers.N.*)"}[hf], kind,
		LayoutModrun, LayoutMetaLlama, LayoutMoDLlama2, LayoutMixtureAI, LayoutHFLlama)
}

// renamer builds the modrun-named checkpoint and remembers which source
// tensors it used, so that the rest can be named in an error.
type renamer struct {
	src  *Checkpoint
	out  map[string]*Tensor
	used map[string]bool
}

func newRenamer(ck *Checkpoint) *renamer {
	r := &renamer{src: ck, out: map[string]*Tensor{}, used: map[string]bool{}}
	for n := range ck.Tensors {
		r.used[n] = derivedNames.MatchString(n) // recomputed from the config: nothing to convert
	}
	return r
}

// take moves tensor from (when present) to the name to; missing tensors are
// left for Convert to report, with the shape it expects.
func (r *renamer) take(from, to string) *Tensor {
	t, ok := r.src.Tensors[from]
	if !ok {
		return nil
	}
	r.used[from] = true
	r.out[to] = t
	return t
}

// vector takes a Linear(d, 1) weight [1, d] (or a bias [1]) as a vector [d].
func (r *renamer) vector(from, to string) {
	if t := r.take(from, to); t != nil && len(t.Shape) == 2 && t.Shape[0] == 1 {
		r.out[to] = &Tensor{Shape: []int{t.Shape[1]}, Data: t.Data}
	}
}

// same marks from as used when it holds exactly the data of the tensor
// already taken as shared (a module saved under several names).
func (r *renamer) same(from, shared string) error {
	t, ok := r.src.Tensors[from]
	if !ok {
		return nil
	}
	if !equalData(t, r.src.Tensors[shared]) {
		return fmt.Errorf("tensor %q differs from %q: the layout shares one module between them", from, shared)
	}
	r.used[from] = true
	return nil
}

// done fails naming the tensors no rule took.
func (r *renamer) done(layout Layout) (*Checkpoint, error) {
	var extra []string
	for _, n := range r.src.Names() {
		if !r.used[n] {
			extra = append(extra, n)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		if len(extra) > 8 {
			extra = append(extra[:8], fmt.Sprintf("and %d more", len(extra)-8))
		}
		return nil, fmt.Errorf("layout %s: unexpected tensors: %s", layout, strings.Join(extra, ", "))
	}
	return &Checkpoint{Path: r.src.Path, Tensors: r.out}, nil
}

// hfBlockNames maps Meta's block tensor names (blockNames) to HF's.
var hfBlockNames = map[string]string{
	"attention_norm.weight": "input_layernorm.weight", "attention.wq.weight": "self_attn.q_proj.weight",
	"attention.wk.weight": "self_attn.k_proj.weight", "attention.wv.weight": "self_attn.v_proj.weight",
	"attention.wo.weight": "self_attn.o_proj.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
	"feed_forward.w1.weight": "mlp.gate_proj.weight", "feed_forward.w3.weight": "mlp.up_proj.weight",
	"feed_forward.w2.weight": "mlp.down_proj.weight",
}

// takeBlock takes block i's Llama tensors from srcPrefix (Meta or HF names);
// HF's q/k rows go back to Meta's interleaved RoPE pairs.
func (r *renamer) takeBlock(i int, srcPrefix string, hf bool, cfg *Config) {
	dst := fmt.Sprintf("layers.%d.", i)
	for _, bn := range blockNames {
		from := bn.meta
		if hf {
			from = hfBlockNames[bn.meta]
		}
		t := r.take(srcPrefix+from, dst+bn.meta)
		if t == nil || !hf {
			continue
		}
		switch bn.meta {
		case "attention.wq.weight":
			r.out[dst+bn.meta] = unpermuteRows(t, cfg.NHeads)
		case "attention.wk.weight":
			r.out[dst+bn.meta] = unpermuteRows(t, cfg.NKVHeads)
		}
	}
}

// layerPrefix is block i's name prefix under Meta's or HF's names.
func layerPrefix(hf bool, i int) string {
	if hf {
		return fmt.Sprintf("model.layers.%d.", i)
	}
	return fmt.Sprintf("layers.%d.", i)
}

// takeOuter takes the embedding, final norm and output.
func (r *renamer) takeOuter(hf bool) {
	if hf {
		r.take("model.embed_tokens.weight", "tok_embeddings.weight")
		r.take("model.norm.weight", "norm.weight")
		r.take("lm_head.weight", "output.weight")
		return
	}
	for _, n := range []string{"tok_embeddings.weight", "norm.weight", "output.weight"} {
		r.take(n, n)
	}
}

// unpermuteRows brings q or k rows from Hugging Face's rotate-half order
// (within a head, row c*hd/2+i) back to Meta's interleaved pairs (row 2i+c),
// as llama.cpp's converters do, so that GGUF's "norm" RoPE applies. A
// tensor of another shape is returned as is, for Convert's shape check.
func unpermuteRows(t *Tensor, nHeads int) *Tensor {
	if len(t.Shape) != 2 || nHeads <= 0 || t.Shape[0]%(2*nHeads) != 0 {
		return t
	}
	rows, cols := t.Shape[0], t.Shape[1]
	hd := rows / nHeads
	out := &Tensor{Shape: []int{rows, cols}, Data: make([]float32, len(t.Data))}
	for h := 0; h < nHeads; h++ {
		for c := 0; c < 2; c++ {
			for i := 0; i < hd/2; i++ {
				src, dst := h*hd+c*hd/2+i, h*hd+2*i+c
				copy(out.Data[dst*cols:(dst+1)*cols], t.Data[src*cols:(src+1)*cols])
			}
		}
	}
	return out
}

// adaptMoDLlama2: Meta names; one router (and aux router) shared by every
// block, saved at the top and again under each block; routed blocks l with
// l % router_skip_blocks != 0.
func adaptMoDLlama2(ck *Checkpoint, raw jsonObject) (*Source, error) {
	cfg, p, err := metaConfig(ck, raw)
	if err != nil {
		return nil, err
	}
	if !p.routing {
		return nil, fmt.Errorf("params.json says routing = 0, but the checkpoint has router tensors")
	}
	if p.capacity, err = raw.int("capacity", 0, 0, 1<<20); err != nil { // a token count here
		return nil, err
	}
	if p.capacity <= 0 || p.skip <= 0 {
		return nil, fmt.Errorf("params.json: capacity %d (tokens) and router_skip_blocks %d must be positive", p.capacity, p.skip)
	}
	r := newRenamer(ck)
	r.takeOuter(false)
	_, aux := ck.Tensors["aux_router.0.weight"]
	sem := &Semantics{GateTarget: mod.GateTargetMLP, Positions: mod.PositionsCompact, CapacityTokens: p.capacity,
		Predictor: mod.PredictorNone, CausalRouting: "router"}
	cfg.Gate = mod.GateSigmoid
	if aux {
		sem.Predictor, sem.CausalRouting = mod.PredictorMLP, "predictor"
		cfg.PredictorHidden = cfg.Dim / 2
	}
	r.used["router.weight"] = true
	for _, n := range []string{"aux_router.0.weight", "aux_router.2.weight"} {
		r.used[n] = aux
	}
	for i := 0; i < cfg.NLayers; i++ {
		r.takeBlock(i, fmt.Sprintf("layers.%d.", i), false, cfg)
		pre := fmt.Sprintf("layers.%d.", i)
		for _, n := range []string{"router.weight", "aux_router.0.weight", "aux_router.2.weight"} {
			if err := r.same(pre+n, n); err != nil {
				return nil, err
			}
		}
		if i%p.skip == 0 {
			continue
		}
		cfg.RoutedLayers = append(cfg.RoutedLayers, i)
		r.vector("router.weight", pre+"mod_router.weight")
		if aux {
			r.take("aux_router.0.weight", pre+"mod_pred_up.weight")
			r.take("aux_router.2.weight", pre+"mod_pred_down.weight")
		}
	}
	cfg.Semantics = sem
	out, err := r.done(LayoutMoDLlama2)
	if err != nil {
		return nil, err
	}
	desc := fmt.Sprintf("MoD Llama 2 (sramshetty/mixture-of-depths): routed layers %v, capacity %d tokens", cfg.RoutedLayers, p.capacity)
	if aux {
		desc += ", aux router"
	}
	return &Source{Layout: LayoutMoDLlama2, Description: desc, Checkpoint: out, Config: cfg}, nil
}

// adaptWrapper: any subset of the blocks wrapped by Mixture-AI's
// MoDTransformerBlock (router_mlp and aux_mlp with bias, the block under
// transformer_block.), with Meta or Hugging Face names.
func adaptWrapper(ck *Checkpoint, raw jsonObject, hf bool, kind configKind) (*Source, error) {
	cfg, err := plainConfig(ck, raw, hf, kind)
	if err != nil {
		return nil, err
	}
	capacity, err := raw.float("capacity", 0.125) // the wrapper's default
	if err != nil {
		return nil, err
	}
	if !(capacity > 0 && capacity <= 1) {
		return nil, fmt.Errorf("config: capacity %v: the wrapper takes a fraction in (0, 1]", capacity)
	}
	r := newRenamer(ck)
	r.takeOuter(hf)
	for i := 0; i < cfg.NLayers; i++ {
		pre, dst := layerPrefix(hf, i), fmt.Sprintf("layers.%d.", i)
		if _, ok := ck.Tensors[pre+"router_mlp.weight"]; !ok {
			r.takeBlock(i, pre, hf, cfg)
			continue
		}
		cfg.RoutedLayers = append(cfg.RoutedLayers, i)
		r.takeBlock(i, pre+"transformer_block.", hf, cfg)
		r.vector(pre+"router_mlp.weight", dst+"mod_router.weight")
		r.take(pre+"router_mlp.bias", dst+"mod_router.bias")
		r.vector(pre+"aux_mlp.weight", dst+"mod_pred.weight")
		r.take(pre+"aux_mlp.bias", dst+"mod_pred.bias")
	}
	cfg.Capacity, cfg.Gate, cfg.RouterBias = capacity, mod.GateIdentity, true
	cfg.Semantics = &Semantics{GateTarget: mod.GateTargetOutput, Positions: mod.PositionsCompact,
		CapacityRounding: mod.RoundingFloor, Predictor: mod.PredictorLinear, CausalRouting: "predictor"}
	out, err := r.done(LayoutMixtureAI)
	if err != nil {
		return nil, err
	}
	names := map[bool]string{true: "Hugging Face", false: "Meta"}[hf]
	desc := fmt.Sprintf("Mixture-AI MoD wrapper (Mixture-AI/Mixture-of-Depths) around %s-named Llama blocks: wrapped layers %v, capacity %g",
		names, cfg.RoutedLayers, capacity)
	return &Source{Layout: LayoutMixtureAI, Description: desc, Checkpoint: out, Config: cfg}, nil
}

// adaptPlain: a dense Llama, Meta names with params.json or Hugging Face
// names with config.json.
func adaptPlain(ck *Checkpoint, raw jsonObject, hf bool, kind configKind) (*Source, error) {
	cfg, err := plainConfig(ck, raw, hf, kind)
	if err != nil {
		return nil, err
	}
	r := newRenamer(ck)
	r.takeOuter(hf)
	for i := 0; i < cfg.NLayers; i++ {
		r.takeBlock(i, layerPrefix(hf, i), hf, cfg)
	}
	layout, desc := LayoutMetaLlama, "Llama (Meta names, params.json)"
	if hf {
		layout, desc = LayoutHFLlama, "Llama (Hugging Face names, config.json; q/k rows permuted to GGUF's RoPE pairs)"
	}
	out, err := r.done(layout)
	if err != nil {
		return nil, err
	}
	return &Source{Layout: layout, Description: desc, Checkpoint: out, Config: cfg}, nil
}

// plainConfig reads a Llama's shape from params.json or config.json.
func plainConfig(ck *Checkpoint, raw jsonObject, hf bool, kind configKind) (*Config, error) {
	switch {
	case hf && kind == configHF:
		return hfConfig(raw)
	case !hf && kind == configMeta:
		cfg, _, err := metaConfig(ck, raw)
		return cfg, err
	}
	return nil, fmt.Errorf("%s tensor names with a %s config: Meta names come with params.json, Hugging Face names with config.json",
		map[bool]string{true: "Hugging Face", false: "Meta"}[hf], kind)
}
