package convert

import (
	"fmt"
)

// ConfigFormat is the "format" of the config JSON train/modllama.py writes.
const ConfigFormat = "modrun-train-config/1"

// Config mirrors train/modllama.py's ModelConfig (the JSON beside a checkpoint).
type Config struct {
	Format          string  `json:"format"`
	Dim             int     `json:"dim"`
	NLayers         int     `json:"n_layers"`
	NHeads          int     `json:"n_heads"`
	NKVHeads        int     `json:"n_kv_heads"`
	VocabSize       int     `json:"vocab_size"`
	FFNDim          int     `json:"ffn_dim"`
	NormEps         float64 `json:"norm_eps"`
	RopeBase        float64 `json:"rope_base"`
	MaxSeqLen       int     `json:"max_seq_len"`
	TiedOutput      bool    `json:"tied_output"`
	RoutedLayers    []int   `json:"routed_layers"`
	Capacity        float64 `json:"capacity"`
	Gate            string  `json:"gate"`
	RouterBias      bool    `json:"router_bias"`
	PredictorHidden int     `json:"predictor_hidden"`
	// Training-only fields (aux_loss_weight, ...) are accepted and ignored.
	AuxLossWeight       float64 `json:"aux_loss_weight"`
	PredictorLossWeight float64 `json:"predictor_loss_weight"`

	// Semantics, set by Load for the public layouts (never in the JSON), is
	// how their routed blocks differ from DESIGN.md §3; nil: they do not.
	Semantics *Semantics `json:"-"`
}

// LoadConfig reads and checks a config JSON of train/.
func LoadConfig(path string) (*Config, error) {
	o, err := readConfigJSON(path)
	if err != nil {
		return nil, err
	}
	return parseModrunConfig(o)
}

func (c *Config) check() error {
	switch {
	case c.Format != ConfigFormat:
		return fmt.Errorf("format %q, want %q", c.Format, ConfigFormat)
	case c.Dim <= 0 || c.NLayers <= 0 || c.NHeads <= 0 || c.NKVHeads <= 0 || c.VocabSize <= 0 || c.FFNDim <= 0:
		return fmt.Errorf("dim, n_layers, n_heads, n_kv_heads, vocab_size and ffn_dim must be positive")
	case c.Dim%c.NHeads != 0 || c.NHeads%c.NKVHeads != 0:
		return fmt.Errorf("dim %d must divide by n_heads %d, and n_heads by n_kv_heads %d", c.Dim, c.NHeads, c.NKVHeads)
	case (c.Dim/c.NHeads)%2 != 0:
		return fmt.Errorf("head dim %d must be even for RoPE", c.Dim/c.NHeads)
	case c.NormEps <= 0 || c.RopeBase <= 0 || c.MaxSeqLen <= 0:
		return fmt.Errorf("norm_eps, rope_base and max_seq_len must be positive")
	case c.PredictorHidden < 0:
		return fmt.Errorf("predictor_hidden %d is negative", c.PredictorHidden)
	}
	if len(c.RoutedLayers) == 0 {
		return nil
	}
	if !(c.Capacity > 0 && c.Capacity <= 1) && !c.capacityInTokens() {
		return fmt.Errorf("capacity %v: want (0, 1]", c.Capacity)
	}
	if c.Gate != "sigmoid" && c.Gate != "identity" {
		return fmt.Errorf("gate %q: want sigmoid or identity", c.Gate)
	}
	prev := 0
	if c.Semantics != nil {
		prev = -1 // the public layouts may route block 0
	}
	for _, l := range c.RoutedLayers {
		if l <= prev || l >= c.NLayers {
			return fmt.Errorf("routed_layers %v: want ascending block indices in 1..%d (block 0 is always dense)", c.RoutedLayers, c.NLayers-1)
		}
		prev = l
	}
	return nil
}

func (c *Config) capacityInTokens() bool { return c.Semantics != nil && c.Semantics.CapacityTokens > 0 }

// HeadDim is dim / n_heads.
func (c *Config) HeadDim() int { return c.Dim / c.NHeads }

func (c *Config) routed(layer int) bool {
	for _, l := range c.RoutedLayers {
		if l == layer {
			return true
		}
	}
	return false
}
