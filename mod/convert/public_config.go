package convert

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
)

// The config files of the public layouts, taken as they are: Meta's
// params.json (Llama 2's ModelArgs, and MoD Llama 2's additions) and
// Hugging Face's config.json. Unknown fields are ignored (they carry
// training settings); missing ones take the defaults of the code that
// wrote them.

type configKind string

const (
	configModrun configKind = "modrun train/ config"
	configMeta   configKind = "Meta params.json"
	configHF     configKind = "Hugging Face config.json"
)

// maxConfigBytes bounds a config file: they are a few hundred bytes.
const maxConfigBytes = 1 << 20

// jsonObject is a config file's top-level object.
type jsonObject struct {
	path   string
	raw    []byte
	fields map[string]json.RawMessage
}

func readConfigJSON(path string) (jsonObject, error) {
	st, err := os.Stat(path)
	if err != nil {
		return jsonObject{}, fmt.Errorf("config: %w", err)
	}
	if st.Size() > maxConfigBytes {
		return jsonObject{}, fmt.Errorf("config %s: %d bytes; a config file is at most %d", path, st.Size(), maxConfigBytes)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return jsonObject{}, fmt.Errorf("config: %w", err)
	}
	o := jsonObject{path: path, raw: raw}
	if err := json.Unmarshal(raw, &o.fields); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return o, fmt.Errorf("config %s: not JSON at byte %d: %w", path, syntax.Offset, err)
		}
		return o, fmt.Errorf("config %s: %w", path, err)
	}
	return o, nil
}

func (o jsonObject) kind() configKind {
	var format string
	_ = json.Unmarshal(o.fields["format"], &format)
	switch {
	case format == ConfigFormat:
		return configModrun
	case o.has("hidden_size"):
		return configHF
	case o.has("dim"):
		return configMeta
	}
	return "unknown config (neither train/'s format, a params.json with dim, nor a config.json with hidden_size)"
}

func (o jsonObject) has(k string) bool {
	v, ok := o.fields[k]
	return ok && string(v) != "null"
}

// float reads a number (absent or null: def).
func (o jsonObject) float(k string, def float64) (float64, error) {
	if !o.has(k) {
		return def, nil
	}
	var v float64
	if err := json.Unmarshal(o.fields[k], &v); err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("config %s: %s = %s is not a number", o.path, k, o.fields[k])
	}
	return v, nil
}

// int reads a whole number within [lo, hi] (absent or null: def).
func (o jsonObject) int(k string, def, lo, hi int) (int, error) {
	v, err := o.float(k, float64(def))
	if err != nil {
		return 0, err
	}
	if v != math.Trunc(v) || v < float64(lo) || v > float64(hi) {
		return 0, fmt.Errorf("config %s: %s = %v is not a whole number in [%d, %d]", o.path, k, v, lo, hi)
	}
	return int(v), nil
}

// bool reads true/false or 0/1 (MoD Llama 2's trainer writes bools as ints).
func (o jsonObject) bool(k string, def bool) (bool, error) {
	if !o.has(k) {
		return def, nil
	}
	var b bool
	if json.Unmarshal(o.fields[k], &b) == nil {
		return b, nil
	}
	n, err := o.int(k, 0, 0, 1)
	return n == 1, err
}

// parseModrunConfig reads train/'s own config strictly, as LoadConfig does.
func parseModrunConfig(o jsonObject) (*Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(o.raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("config %s: %w", o.path, err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("config %s: %w", o.path, err)
	}
	return &c, nil
}

// metaParams are params.json's MoD Llama 2 fields.
type metaParams struct {
	routing  bool
	capacity int // tokens (read by adaptMoDLlama2: the wrapper's is a fraction)
	skip     int // router_skip_blocks
}

const maxShape = 1 << 20

// metaConfig reads params.json: Llama 2's ModelArgs (dim, n_layers,
// n_heads, n_kv_heads, vocab_size, multiple_of, ffn_dim_multiplier,
// norm_eps, max_seq_len, rope_theta) and MoD Llama 2's (routing, capacity,
// router_skip_blocks). The FFN width is Llama 2's rule; a vocab_size of -1
// (Meta's own files) is the embedding's row count.
func metaConfig(ck *Checkpoint, o jsonObject) (*Config, metaParams, error) {
	var p metaParams
	c := &Config{Format: ConfigFormat, Gate: "sigmoid"}
	var err error
	read := func(dst *int, k string, def, lo, hi int) {
		if err == nil {
			*dst, err = o.int(k, def, lo, hi)
		}
	}
	read(&c.Dim, "dim", 0, 1, maxShape)
	read(&c.NLayers, "n_layers", 0, 1, 1<<10)
	read(&c.NHeads, "n_heads", 0, 1, maxShape)
	read(&c.NKVHeads, "n_kv_heads", c.NHeads, 1, maxShape)
	read(&c.VocabSize, "vocab_size", -1, -1, 1<<24)
	read(&c.MaxSeqLen, "max_seq_len", 2048, 1, 1<<20) // ModelArgs' default; MoD Llama 2's trainer drops the field
	var multipleOf int
	read(&multipleOf, "multiple_of", 256, 1, maxShape)
	read(&p.skip, "router_skip_blocks", 2, 1, 1<<10)
	if err != nil {
		return nil, p, err
	}
	if c.NormEps, err = o.float("norm_eps", 1e-5); err != nil {
		return nil, p, err
	}
	if c.RopeBase, err = o.float("rope_theta", 10000); err != nil {
		return nil, p, err
	}
	if p.routing, err = o.bool("routing", true); err != nil {
		return nil, p, err
	}
	mult, err := o.float("ffn_dim_multiplier", 0)
	if err != nil {
		return nil, p, err
	}
	c.FFNDim = llama2FFNDim(c.Dim, multipleOf, mult)
	if c.VocabSize <= 0 {
		if t, ok := ck.Tensors["tok_embeddings.weight"]; ok && len(t.Shape) == 2 {
			c.VocabSize = t.Shape[0]
		}
	}
	_, hasOutput := ck.Tensors["output.weight"]
	c.TiedOutput = !hasOutput
	if err := c.check(); err != nil {
		return nil, p, fmt.Errorf("config %s: %w", o.path, err)
	}
	return c, p, nil
}

// llama2FFNDim is Llama 2's SwiGLU width: int(2*4*dim/3), times the
// multiplier when there is one (> 0), rounded up to a multiple of multipleOf.
func llama2FFNDim(dim, multipleOf int, mult float64) int {
	h := 2 * 4 * dim / 3
	if mult > 0 {
		h = int(mult * float64(h))
	}
	return multipleOf * ((h + multipleOf - 1) / multipleOf)
}

// hfConfig reads a Hugging Face LlamaConfig.
func hfConfig(o jsonObject) (*Config, error) {
	c := &Config{Format: ConfigFormat, Gate: "sigmoid"}
	var err error
	read := func(dst *int, k string, def, lo, hi int) {
		if err == nil {
			*dst, err = o.int(k, def, lo, hi)
		}
	}
	read(&c.Dim, "hidden_size", 0, 1, maxShape)
	read(&c.NLayers, "num_hidden_layers", 0, 1, 1<<10)
	read(&c.NHeads, "num_attention_heads", 0, 1, maxShape)
	read(&c.NKVHeads, "num_key_value_heads", c.NHeads, 1, maxShape)
	read(&c.FFNDim, "intermediate_size", 0, 1, maxShape)
	read(&c.VocabSize, "vocab_size", 0, 1, 1<<24)
	read(&c.MaxSeqLen, "max_position_embeddings", 2048, 1, 1<<20)
	if err != nil {
		return nil, err
	}
	if c.NormEps, err = o.float("rms_norm_eps", 1e-6); err != nil {
		return nil, err
	}
	if c.RopeBase, err = o.float("rope_theta", 10000); err != nil {
		return nil, err
	}
	if c.TiedOutput, err = o.bool("tie_word_embeddings", false); err != nil {
		return nil, err
	}
	var act string
	if o.has("hidden_act") && (json.Unmarshal(o.fields["hidden_act"], &act) != nil || act != "silu") {
		return nil, fmt.Errorf("config %s: hidden_act %s: only silu (SwiGLU) is supported", o.path, o.fields["hidden_act"])
	}
	for _, k := range []string{"rope_scaling", "attention_bias", "mlp_bias"} {
		if o.has(k) && string(o.fields[k]) != "false" {
			return nil, fmt.Errorf("config %s: %s = %s is not supported", o.path, k, o.fields[k])
		}
	}
	if hd, err := o.int("head_dim", c.Dim/c.NHeads, 1, maxShape); err != nil || hd*c.NHeads != c.Dim {
		return nil, fmt.Errorf("config %s: head_dim must be hidden_size / num_attention_heads (%d)", o.path, c.Dim/c.NHeads)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("config %s: %w", o.path, err)
	}
	return c, nil
}
