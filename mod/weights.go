package mod

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"

	"github.com/modrun/modrun/gguf"
)

// Weights are a model's tensors, declared once. Each field's tag names its
// GGUF tensor and its shape in ggml order (dims[0] contiguous) in terms of the
// Config; the loader checks every one and refuses tensors it does not know.
// Tag options: "optional" (absent is allowed; Output absent = tied to
// TokenEmbd, Bias absent = 0), "f32" (must be stored as F32).
type Weights struct {
	TokenEmbd  Mat `gguf:"token_embd.weight" shape:"nEmbd,nVocab"` // [nVocab][nEmbd]
	OutputNorm Mat `gguf:"output_norm.weight" shape:"nEmbd"`       // [nEmbd]
	Output     Mat `gguf:"output.weight" shape:"nEmbd,nVocab" opt:"optional"`
	// RopeFreqs are Llama 3.1's RoPE frequency factors (absent: all 1),
	// which divide each pair's frequency (RopeFrequencies).
	RopeFreqs Mat     `gguf:"rope_freqs.weight" shape:"halfHeadDim" opt:"f32,optional"` // [headDim/2]
	Blocks    []Block // [nLayer]
}

// RopeFactors are the RoPE frequency factors, nil when the file has none.
func (w *Weights) RopeFactors() []float32 {
	if w.RopeFreqs.Cols == 0 {
		return nil
	}
	return w.RopeFreqs.Vec()
}

// Block is one transformer block; Router is nil for dense blocks.
type Block struct {
	AttnNorm Mat     `gguf:"attn_norm.weight" shape:"nEmbd"`        // [nEmbd]
	Q        Mat     `gguf:"attn_q.weight" shape:"nEmbd,qDim"`      // [nHead*headDim][nEmbd]
	K        Mat     `gguf:"attn_k.weight" shape:"nEmbd,kvDim"`     // [nKVHead*headDim][nEmbd]
	V        Mat     `gguf:"attn_v.weight" shape:"nEmbd,kvDim"`     // [nKVHead*headDim][nEmbd]
	O        Mat     `gguf:"attn_output.weight" shape:"qDim,nEmbd"` // [nEmbd][nHead*headDim]
	FFNNorm  Mat     `gguf:"ffn_norm.weight" shape:"nEmbd"`         // [nEmbd]
	Gate     Mat     `gguf:"ffn_gate.weight" shape:"nEmbd,nFF"`     // [nFF][nEmbd]
	Up       Mat     `gguf:"ffn_up.weight" shape:"nEmbd,nFF"`       // [nFF][nEmbd]
	Down     Mat     `gguf:"ffn_down.weight" shape:"nFF,nEmbd"`     // [nEmbd][nFF]
	Router   *Router // routed blocks only
}

// Router holds a routed block's router and, when trained, its causal
// predictor: an MLP (PredUp, PredDown) or a linear one (Pred, PredBias).
type Router struct {
	Weight   Mat  `gguf:"mod_router.weight" shape:"nEmbd" opt:"f32"`             // [nEmbd]
	Bias     Mat  `gguf:"mod_router.bias" shape:"1" opt:"f32,optional"`          // [1]
	PredUp   *Mat `gguf:"mod_pred_up.weight" shape:"nEmbd,predHidden" opt:"f32"` // [predHidden][nEmbd]
	PredDown *Mat `gguf:"mod_pred_down.weight" shape:"predHidden" opt:"f32"`     // [predHidden]
	Pred     *Mat `gguf:"mod_pred.weight" shape:"nEmbd" opt:"f32"`               // [nEmbd]
	PredBias *Mat `gguf:"mod_pred.bias" shape:"1" opt:"f32"`                     // [1]
}

// loader binds tensors of one file to struct fields and remembers which
// tensors were used, so unknown ones can be reported.
type loader struct {
	f    *gguf.File
	dims map[string]uint64 // shape symbols -> sizes
	used map[string]bool
}

// LoadWeights reads and checks every tensor of f against c.
func LoadWeights(f *gguf.File, c Config) (*Weights, error) {
	ld := &loader{f: f, used: map[string]bool{}, dims: map[string]uint64{
		"nEmbd": uint64(c.NEmbd), "nVocab": uint64(c.NVocab), "nFF": uint64(c.NFF), "1": 1,
		"qDim": uint64(c.NHead * c.HeadDim), "halfHeadDim": uint64(c.HeadDim / 2), "kvDim": uint64(c.KVDim()), "predHidden": uint64(c.PredictorHidden),
	}}
	w := &Weights{Blocks: make([]Block, c.NLayer)}
	if err := ld.bind(reflect.ValueOf(w).Elem(), ""); err != nil {
		return nil, err
	}
	if w.Output.Name == "" {
		w.Output = w.TokenEmbd // tied classifier
	}
	for i, v := range w.RopeFactors() {
		// A factor divides a frequency: 0, a negative or a NaN one would
		// make the angles meaningless.
		if !(v > 0) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("mod: %s: tensor %q: factor %d is %g; RoPE frequency factors must be positive and finite", f.Path, TensorRopeFreqs, i, v)
		}
	}
	for l := range w.Blocks {
		prefix := BlockTensor(l, "")
		if err := ld.bind(reflect.ValueOf(&w.Blocks[l]).Elem(), prefix); err != nil {
			return nil, err
		}
		if !c.Routed[l] {
			continue
		}
		r := &Router{}
		switch c.Predictor {
		case PredictorMLP:
			r.PredUp, r.PredDown = &Mat{}, &Mat{}
		case PredictorLinear:
			r.Pred, r.PredBias = &Mat{}, &Mat{}
		}
		if err := ld.bind(reflect.ValueOf(r).Elem(), prefix); err != nil {
			return nil, err
		}
		if c.RouterBias != nil && *c.RouterBias != (r.Bias.Cols > 0) {
			return nil, fmt.Errorf("mod: %s: %s = %v, but tensor %q is %s", f.Path, ArchKey(c.Arch, KeyRouterBias), *c.RouterBias,
				prefix+TensorRouterBias, map[bool]string{true: "present", false: "absent"}[r.Bias.Cols > 0])
		}
		w.Blocks[l].Router = r
	}
	return w, ld.unknown()
}

// bind loads every tagged Mat or non-nil *Mat field of the struct v.
func (ld *loader) bind(v reflect.Value, prefix string) error {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		field := t.Field(i)
		name, ok := field.Tag.Lookup("gguf")
		if !ok {
			continue
		}
		dst, ok := v.Field(i).Addr().Interface().(*Mat)
		if !ok {
			p, isPtr := v.Field(i).Interface().(*Mat)
			if !isPtr || p == nil {
				continue // an optional part this model does not have
			}
			dst = p
		}
		opts := field.Tag.Get("opt")
		if err := ld.load(dst, prefix+name, field.Tag.Get("shape"), opts); err != nil {
			return err
		}
	}
	return nil
}

func (ld *loader) load(dst *Mat, name, shape, opts string) error {
	info, ok := ld.f.Tensor(name)
	if !ok {
		if strings.Contains(opts, "optional") {
			return nil
		}
		return fmt.Errorf("mod: %s: tensor %q is missing", ld.f.Path, name)
	}
	ld.used[name] = true
	var want []uint64
	for _, sym := range strings.Split(shape, ",") {
		want = append(want, ld.dims[sym])
	}
	if !reflect.DeepEqual(info.Dims, want) {
		return fmt.Errorf("mod: %s: tensor %q has shape %v, want %v (%s)", ld.f.Path, name, info.Dims, want, shape)
	}
	if strings.Contains(opts, "f32") && info.Type != gguf.TypeF32 {
		what := "MoD tensors"
		if name == TensorRopeFreqs {
			what = "RoPE frequency factors" // as llama.cpp requires
		}
		return fmt.Errorf("mod: %s: tensor %q is %s; %s must be F32", ld.f.Path, name, info.Type, what)
	}
	data, err := ld.f.TensorData(name)
	if err != nil {
		return fmt.Errorf("mod: %w", err)
	}
	m, err := NewMat(name, info.Type, want, data)
	if err != nil {
		return fmt.Errorf("mod: %s: %w", ld.f.Path, err)
	}
	*dst = m
	return nil
}

// unknown reports tensors in the file that no field took: a file with extra
// tensors is not the model we think it is.
func (ld *loader) unknown() error {
	var extra []string
	for _, t := range ld.f.Tensors {
		if !ld.used[t.Name] {
			extra = append(extra, t.Name)
		}
	}
	if len(extra) == 0 {
		return nil
	}
	sort.Strings(extra)
	if len(extra) > 5 {
		extra = append(extra[:5], fmt.Sprintf("and %d more", len(extra)-5))
	}
	return fmt.Errorf("mod: %s: unknown tensors for this configuration: %s", ld.f.Path, strings.Join(extra, ", "))
}
