package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/modrun/modrun/bench"
	"github.com/modrun/modrun/engine"
)

// perplexityReport is what `modrun perplexity` prints: as text, or with
// --json as one JSON document.
type perplexityReport struct {
	Model      string `json:"model"`
	Text       string `json:"text"`
	Routing    string `json:"routing"` // dense, or the routing (and top-k's capacity)
	Backend    string `json:"backend"`
	KVType     string `json:"kv_type,omitempty"` // --kv-type, when given
	Window     int    `json:"window"`            // the longest window, BOS included
	TextTokens int    `json:"text_tokens"`       // the text's tokens; Tokens of them were scored
	engine.PerplexityResult
	Perplexity  float64        `json:"perplexity"`
	TokensPerS  float64        `json:"tokens_per_s"`
	Interrupted bool           `json:"interrupted"` // ^C: the windows scored before it
	Compare     *compareReport `json:"compare,omitempty"`
}

// compareReport is --compare's reference and the comparison's figures.
type compareReport struct {
	With    string `json:"with"`    // --compare's value
	Backend string `json:"backend"` // the reference's backend
	Model   string `json:"model"`   // the reference's model file
	*bench.CompareResult
}

func (rep *perplexityReport) write(w io.Writer, asJSON bool) error {
	return writeReport(w, asJSON, rep, rep.text())
}

// writeReport writes a command's report: with --json, v as one indented
// JSON document; otherwise its text.
func writeReport(w io.Writer, asJSON bool, v any, text string) error {
	if !asJSON {
		_, err := io.WriteString(w, text)
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// text is the report for a reader: the run, the NLL and perplexity, and
// with --compare the reference's and the comparison's figures with their
// standard errors.
func (rep *perplexityReport) text() string {
	var b []byte
	p := func(format string, a ...any) { b = fmt.Appendf(b, format, a...) }
	p("model %s, text %s, routing %s, backend %s", rep.Model, rep.Text, rep.Routing, rep.Backend)
	if rep.KVType != "" {
		p(", %s KV cache", rep.KVType)
	}
	p("\n")
	windows := "windows"
	if rep.Windows == 1 {
		windows = "window"
	}
	p("%d tokens in %d %s of at most %d: NLL %.4f nats/token, perplexity %.3f (%.0f tokens/s)\n",
		rep.Tokens, rep.Windows, windows, rep.Window, rep.NLL, rep.Perplexity, rep.TokensPerS)
	if c := rep.Compare; c != nil && c.CompareResult != nil {
		ref := "backend " + c.Backend
		if c.Model != rep.Model {
			ref = c.Model + " on " + c.Backend
		}
		r := c.CompareResult
		p("reference %s: NLL %.4f nats/token, perplexity %.3f\n", ref, r.RefNLL, r.RefPerplexity())
		p("ΔNLL %+.6f ± %.6f nats/token (ln(PPL/PPL of the reference)), mean KL divergence %.4g ± %.2g nats (max %.4g), top-1 agreement %.2f%% ± %.2f%%\n",
			r.DeltaNLL, r.DeltaNLLErr, r.MeanKL, r.MeanKLErr, r.MaxKL, 100*r.Top1, 100*r.Top1Err)
	}
	if rep.Interrupted {
		p("(interrupted: %d of the text's %d tokens scored)\n", rep.Tokens, rep.TextTokens)
	}
	return string(b)
}
