package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/shared"
)

// storyFile writes a short story to a temporary file.
func storyFile(t *testing.T) string {
	t.Helper()
	text := filepath.Join(t.TempDir(), "story.txt")
	require.NoError(t, os.WriteFile(text, []byte("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "+
		"One day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"), 0o644))
	return text
}

// TestPerplexityCompare: --compare with another backend on the same model
// (the CPU backend's 8-bit activations against the reference: near) and
// with another file (Q4_K_M against its F32 twin); the figures printed are
// those of the JSON document; a file of another vocabulary is refused.
func TestPerplexityCompare(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	text := storyFile(t)
	code, out, stderr := modrun(t, "perplexity", "-m", model, "-f", text, "--ctx", "32", "--backend", "cpu", "--compare", "reference")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "routing dense, backend cpu\n")
	assert.Regexp(t, `\nreference backend reference: NLL \d+\.\d{4} nats/token, perplexity [\d.]+\n`, out)
	m := regexp.MustCompile(`ΔNLL ([+-][\d.]+) ± ([\d.]+) nats/token \(ln\(PPL/PPL of the reference\)\), mean KL divergence ([\d.e-]+) ± [\d.e-]+ nats \(max [\d.e-]+\), top-1 agreement ([\d.]+)% ± [\d.]+%\n`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	kl, err := strconv.ParseFloat(m[3], 64)
	require.NoError(t, err)
	assert.Less(t, kl, 1e-6, "stories260K is F32: float rounding only")
	assert.Equal(t, "100.00", m[4])

	q4, f32 := shared.Path(t, "quant/kq-Q4_K_M.gguf"), shared.Path(t, "quant/kq-f32.gguf")
	code, out, stderr = modrun(t, "perplexity", "-m", q4, "-f", text, "--ctx", "32", "--backend", "cpu", "--compare", f32, "--json")
	require.Equal(t, 0, code, stderr)
	var rep struct {
		Backend string  `json:"backend"`
		Tokens  int     `json:"tokens"`
		NLL     float64 `json:"nll"`
		Compare struct {
			Model    string  `json:"model"`
			NLL      float64 `json:"nll"`
			RefNLL   float64 `json:"ref_nll"`
			DeltaNLL float64 `json:"delta_nll"`
			DeltaErr float64 `json:"delta_nll_stderr"`
			MeanKL   float64 `json:"mean_kl"`
			Top1     float64 `json:"top1_agreement"`
		} `json:"compare"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, "cpu", rep.Backend)
	assert.Equal(t, f32, rep.Compare.Model)
	assert.Equal(t, rep.NLL, rep.Compare.NLL)
	assert.InDelta(t, rep.Compare.NLL-rep.Compare.RefNLL, rep.Compare.DeltaNLL, 1e-9)
	assert.Positive(t, rep.Compare.DeltaErr)
	assert.Positive(t, rep.Compare.MeanKL, "Q4_K_M's weights are not F32's")
	assert.Less(t, rep.Compare.MeanKL, 0.05)
	assert.Greater(t, rep.Compare.Top1, 0.5)

	code, _, stderr = modrun(t, "perplexity", "-m", model, "-f", text, "--backend", "cpu", "--compare", f32)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "--compare "+f32+": its vocabulary (1024 tokens, BOS 1) is not that of "+model+" (512 tokens, BOS 1)")
	code, _, stderr = modrun(t, "perplexity", "-m", model, "-f", text, "--compare", filepath.Join(t.TempDir(), "none.gguf"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "none.gguf: no such file or directory (want a backend, auto, cpu, reference or vulkan, or a model file)")
}

// TestPerplexityJSON: --json prints one document with the text's figures.
func TestPerplexityJSON(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	text := storyFile(t)
	code, out, stderr := modrun(t, "perplexity", "-m", model, "-f", text, "--ctx", "16", "--backend", "cpu", "--json")
	require.Equal(t, 0, code, stderr)
	var rep map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Equal(t, model, rep["model"])
	assert.Equal(t, "dense", rep["routing"])
	assert.Equal(t, 16.0, rep["window"])
	assert.Equal(t, rep["text_tokens"], rep["tokens"])
	assert.Equal(t, 5.0, rep["windows"], "BOS and 15 tokens a window")
	assert.Equal(t, false, rep["interrupted"])
	assert.Less(t, rep["nll"], 2.0)
	assert.Positive(t, rep["nll_stderr"])
	assert.NotContains(t, rep, "compare")
}

// TestPerplexityInterruptedPrintsPartial: an interrupt between windows
// prints the result of the windows scored so far, says so, and exits 130;
// with --json the document says interrupted.
func TestPerplexityInterruptedPrintsPartial(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	text := storyFile(t)
	for _, asJSON := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		interrupt = ctx
		scored = func(done int) {
			if done >= 30 {
				cancel() // as main does on ^C
			}
		}
		args := []string{"perplexity", "-m", model, "-f", text, "--ctx", "16", "--backend", "cpu"}
		if asJSON {
			args = append(args, "--json")
		}
		code, out, stderr := modrun(t, args...)
		interrupt, scored = context.Background(), nil
		cancel()
		assert.Equal(t, exitInterrupted, code, stderr)
		if !asJSON {
			assert.Contains(t, out, "30 tokens in 2 windows of at most 16: NLL ")
			assert.Regexp(t, `\n\(interrupted: 30 of the text's \d+ tokens scored\)\n$`, out)
			continue
		}
		var rep map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
		assert.Equal(t, true, rep["interrupted"])
		assert.Equal(t, 30.0, rep["tokens"])
		assert.Greater(t, rep["text_tokens"], 30.0)
	}
}

// TestPerplexityKVType: --kv-type sets the scored model's cache and not
// --compare BACKEND's: at f32 against cpu the two are the same runs (KL 0),
// at f16 halves move the distributions, slightly (stories260K is F32).
func TestPerplexityKVType(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	text := storyFile(t)
	for _, kv := range []string{"f32", "f16"} {
		code, out, stderr := modrun(t, "perplexity", "-m", model, "-f", text, "--ctx", "32", "--backend", "cpu", "--kv-type", kv, "--compare", "cpu", "--json")
		require.Equal(t, 0, code, stderr)
		var rep struct {
			KVType  string `json:"kv_type"`
			Compare struct {
				MaxKL float64 `json:"max_kl"`
			} `json:"compare"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
		assert.Equal(t, kv, rep.KVType)
		if kv == "f32" {
			assert.Zero(t, rep.Compare.MaxKL, "the same cache as the reference's")
		} else {
			assert.Positive(t, rep.Compare.MaxKL, "halves are not floats")
			assert.Less(t, rep.Compare.MaxKL, 1e-3)
		}
	}
}
