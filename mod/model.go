package mod

import (
	"fmt"

	"github.com/modrun/modrun/gguf"
)

// Model is a loaded model: configuration and weights, served from the
// file's memory mapping until Close.
type Model struct {
	Path    string
	Config  Config
	Weights *Weights
	File    *gguf.File // the metadata, for the tokenizer
}

// Open loads the model in a GGUF file, checking its metadata and every tensor.
func Open(path string) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := FromFile(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return m, nil
}

// FromFile loads the model of an open GGUF file; Close closes the file.
func FromFile(f *gguf.File) (*Model, error) {
	c, err := ConfigFromGGUF(f)
	if err != nil {
		return nil, err
	}
	w, err := LoadWeights(f, c)
	if err != nil {
		return nil, err
	}
	return &Model{Path: f.Path, Config: c, Weights: w, File: f}, nil
}

// RopeFreqs is the model's RoPE table, radians per position of each pair
// of a head ([HeadDim/2]): RopeFrequencies of its configuration and
// frequency factors. Every backend rotates by it.
func (m *Model) RopeFreqs() []float64 { return RopeFrequencies(m.Config, m.Weights.RopeFactors()) }

// Close releases the file. The model must not be used afterwards.
func (m *Model) Close() error {
	if err := m.File.Close(); err != nil {
		return fmt.Errorf("mod: %w", err)
	}
	return nil
}
