//go:build llamakld

package bench

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
)

// TestLlamaKLD is a measurement, not a check, run by hand (see
// bench/results/cpu-quant-nll-vs-llamacpp.md): the KL divergence of a
// quantized file from its F32 twin under modrun and under llama.cpp, on the
// very token positions llama-perplexity scores, and the two engines against
// each other.
//
// llama-perplexity --kl-divergence-base BASE.kld stores its windows' tokens
// and, for the second half of each window, the log-probabilities rounded to
// 16 bits (a step of up to 16/65535 nats, and everything more than 16 nats
// below the top clipped). On a model whose quantization moves the logits by
// 1e-4 its printed KLD is that rounding, so llama.cpp's float32 logits are
// dumped instead by a small program against libllama (the results file has
// it) on the same windows: LOGITS files of [chunks][n_ctx-1-n_ctx/2][n_vocab]
// float32. modrun scores the same windows here (BOS, then tokens 1 ..
// n_ctx-1 of the chunk, as llama-perplexity feeds them) and keeps the same
// positions.
//
// MODRUN_LLAMA_KLD="FILE TWIN BASE.kld LLAMA_FILE.f32 LLAMA_TWIN.f32
// [BACKEND]" (BACKEND cpu, the default, or reference), and the build tag
// llamakld (go test -tags llamakld), so that the suite neither runs nor
// skips it.
func TestLlamaKLD(t *testing.T) {
	args := strings.Fields(os.Getenv("MODRUN_LLAMA_KLD"))
	if len(args) < 5 {
		t.Skip(`a measurement: MODRUN_LLAMA_KLD="kq-T.gguf twin-T.gguf base-T.kld l-file-T.f32 l-twin-T.gguf [cpu|reference]"`)
	}
	backend := engine.BackendCPU
	if len(args) > 5 {
		backend = args[5]
	}
	base := readKLDBase(t, args[2])
	nPos := base.nCtx - 1 - base.nCtx/2
	lF := readLogits(t, args[3], base.nChunk*nPos*base.nVocab) // [chunk][pos][vocab]
	lT := readLogits(t, args[4], base.nChunk*nPos*base.nVocab)
	mF := modrunLogits(t, args[0], backend, base) // [chunk][pos][vocab]
	mT := modrunLogits(t, args[1], backend, base)

	pairs := []struct {
		name       string
		base, test []float32
	}{
		{"modrun " + backend + ": twin -> file", mT, mF},
		{"llama.cpp: twin -> file", lT, lF},
		{"twin: llama.cpp -> modrun", lT, mT},
		{"file: llama.cpp -> modrun", lF, mF},
		{"llama.cpp twin -> modrun file", lT, mF},
	}
	v := base.nVocab
	targets := base.targets()
	for _, p := range pairs {
		var kl, dnll, dp, top1, nllT stats.Moments
		maxKL := 0.0
		for i, y := range targets {
			c := compareToken(p.base[i*v:(i+1)*v], p.test[i*v:(i+1)*v], y)
			kl.Add(c.kl)
			maxKL = math.Max(maxKL, c.kl)
			dnll.Add(c.nll - c.refNLL)
			nllT.Add(c.refNLL)
			dp.Add(math.Exp(-c.nll) - math.Exp(-c.refNLL))
			top1.Add(float64(c.sameTop))
		}
		t.Logf("%-34s n %d  KL %.4e ± %.2e (max %.3e)  top-1 %.4f%%  ΔNLL %+.6f ± %.6f  RMS Δp %.3e  base PPL %.4f",
			p.name, kl.N, kl.Mean(), kl.Stderr(), maxKL, 100*top1.Mean(), dnll.Mean(), dnll.Stderr(),
			math.Sqrt(dp.SumSq/float64(dp.N)), math.Exp(nllT.Mean()))
	}
	// llama.cpp's own estimate, against the 16-bit base, for modrun's file
	// and llama.cpp's: what llama-perplexity --kl-divergence prints.
	for _, p := range []struct {
		name string
		test []float32
	}{{"16-bit base -> llama.cpp file", lF}, {"16-bit base -> modrun file", mF}} {
		var kl stats.Moments
		for i := range targets {
			kl.Add(base.kl16(i, p.test[i*v:(i+1)*v]))
		}
		t.Logf("%-34s KL %.4e ± %.2e (llama-perplexity's formula)", p.name, kl.Mean(), kl.Stderr())
	}
}

// kldBase is a llama-perplexity --kl-divergence-base file: "_logits_",
// n_ctx (uint32), n_vocab and n_chunk (int32), the tokens
// [n_chunk*n_ctx]int32, then for each chunk's positions n_ctx/2 ..
// n_ctx-2 a row of nv = 2*((n_vocab+1)/2)+4 uint16: the float32 scale and
// the float32 minimum log-probability, then n_vocab levels.
type kldBase struct {
	nCtx, nVocab, nChunk int
	tokens               []int32
	rows                 []uint16 // [chunk*pos][nv]
	nv                   int
}

func readKLDBase(t *testing.T, path string) *kldBase {
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, len(raw) > 20 && string(raw[:8]) == "_logits_", "%s: not a llama-perplexity logits file", path)
	le := binary.LittleEndian
	b := &kldBase{nCtx: int(le.Uint32(raw[8:])), nVocab: int(int32(le.Uint32(raw[12:]))), nChunk: int(int32(le.Uint32(raw[16:])))}
	off := 20
	b.tokens = make([]int32, b.nCtx*b.nChunk)
	for i := range b.tokens {
		b.tokens[i] = int32(le.Uint32(raw[off+4*i:]))
	}
	off += 4 * len(b.tokens)
	b.nv = 2*((b.nVocab+1)/2) + 4
	n := b.nChunk * (b.nCtx - 1 - b.nCtx/2) * b.nv
	require.Equal(t, off+2*n, len(raw), "%s: size", path)
	b.rows = make([]uint16, n)
	for i := range b.rows {
		b.rows[i] = le.Uint16(raw[off+2*i:])
	}
	return b
}

// targets are the scored positions' next tokens, in the order of the rows:
// position k of chunk c predicts tokens[c*n_ctx+k+1].
func (b *kldBase) targets() []int32 {
	var out []int32
	for c := range b.nChunk {
		for k := b.nCtx / 2; k < b.nCtx-1; k++ {
			out = append(out, b.tokens[c*b.nCtx+k+1])
		}
	}
	return out
}

// kl16 is llama-perplexity's KL(base || test) of row i: the base's
// log-probabilities as stored, those above -16 nats summed.
func (b *kldBase) kl16(i int, test []float32) float64 {
	row := b.rows[i*b.nv : (i+1)*b.nv]
	scale := math.Float32frombits(uint32(row[0]) | uint32(row[1])<<16)
	minLP := math.Float32frombits(uint32(row[2]) | uint32(row[3])<<16)
	lse := stats.LogSumExp(test)
	var s float64
	for j, q := range row[4 : 4+b.nVocab] {
		lp := float64(scale*float32(q) + minLP)
		if lp > -16 {
			s += math.Exp(lp) * (lp - (float64(test[j]) - lse))
		}
	}
	return s
}

func readLogits(t *testing.T, path string, n int) []float32 {
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, 4*n, len(raw), "%s: [chunks][positions][vocab] float32", path)
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

// modrunLogits scores path on backend over b's windows: each is BOS, then
// tokens 1 .. n_ctx-1 of its chunk (llama-perplexity puts BOS in place of
// the chunk's first token), and keeps positions n_ctx/2 .. n_ctx-2.
func modrunLogits(t *testing.T, path, backend string, b *kldBase) []float32 {
	m, err := mod.Open(path)
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, b.nVocab, m.Config.NVocab, "%s: vocabulary", path)
	sc, _, err := engine.OpenScorer(m, mod.RoutingTopK, engine.BackendOptions{Name: backend, ContextLen: b.nCtx})
	require.NoError(t, err, fmt.Sprintf("%s on %s", path, backend))
	defer sc.Close()
	bos := b.tokens[0]
	var out []float32
	for c := range b.nChunk {
		seq := append([]int32{bos}, b.tokens[c*b.nCtx+1:(c+1)*b.nCtx]...)
		lg, err := sc.Score(seq)
		require.NoError(t, err)
		out = append(out, lg[b.nCtx/2*b.nVocab:(b.nCtx-1)*b.nVocab]...)
	}
	return out
}
