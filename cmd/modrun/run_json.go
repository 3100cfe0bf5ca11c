package main

import (
	"encoding/json"
	"io"

	api "github.com/modrun/modrun"
)

// runJSON is what `modrun run --json` prints: one document.
type runJSON struct {
	Prompt       string      `json:"prompt"`
	Text         string      `json:"text"`          // the generated text, cut at a --stop string
	PromptTokens []int32     `json:"prompt_tokens"` // the prompt's ids, BOS included
	Tokens       []int32     `json:"tokens"`        // the generated ids
	Stop         string      `json:"stop"`          // eos, max-tokens, context-full or stop-string (a --stop)
	Backend      string      `json:"backend"`
	Device       string      `json:"device"`
	Seed         uint64      `json:"seed"`
	Timings      timingsJSON `json:"timings"`
	Routing      []layerJSON `json:"routing"` // per routed layer; empty for a dense model
}

type timingsJSON struct {
	PrefillMS     float64 `json:"prefill_ms"`
	DecodeMS      float64 `json:"decode_ms"`
	PromptTokens  int     `json:"prompt_tokens"`
	DecodeSteps   int     `json:"decode_steps"`
	PrefillPerSec float64 `json:"prefill_tokens_per_s"`
	DecodePerSec  float64 `json:"decode_tokens_per_s"`
}

type layerJSON struct {
	Layer    int `json:"layer"`
	Selected int `json:"selected"` // tokens that went through the block
	Seen     int `json:"seen"`
}

func writeRunJSON(w io.Writer, prompt string, out *runOutput, info api.Info, res api.Result, seed uint64) error {
	doc := runJSON{Prompt: prompt, Text: out.text.String(), PromptTokens: []int32{}, Tokens: []int32{}, Stop: string(res.Stop),
		Backend: info.Backend, Device: info.Device, Seed: seed, Routing: []layerJSON{},
		Timings: timingsJSON{PrefillMS: ms(res.Prefill.Seconds()), DecodeMS: ms(res.Decode.Seconds()), PromptTokens: res.PromptTokens,
			DecodeSteps: res.DecodeSteps, PrefillPerSec: res.PrefillRate(), DecodePerSec: res.DecodeRate()}}
	for _, t := range out.tokens {
		if t.Prompt {
			doc.PromptTokens = append(doc.PromptTokens, t.ID)
		} else {
			doc.Tokens = append(doc.Tokens, t.ID)
		}
	}
	for _, l := range res.Layers {
		doc.Routing = append(doc.Routing, layerJSON{Layer: l.Layer, Selected: l.Selected, Seen: l.Seen})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

func ms(seconds float64) float64 { return seconds * 1e3 }
