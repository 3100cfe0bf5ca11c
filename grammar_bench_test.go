package modrun_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun"
	"github.com/modrun/modrun/engine/grammar"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/tokenizer"
	"github.com/modrun/modrun/vk"
)

// benchSchema lets a generation run for as many tokens as the benchmark
// asks: an array of 100 to 1000 small records.
const benchSchema = `{"type":"array","items":{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0},"tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3}},"required":["name","age"],"additionalProperties":false},"minItems":100,"maxItems":1000}`

// BenchmarkGrammarDecode: decode tokens/s on the CPU and Vulkan backends
// of a random-weight stories15M (32,000 tokens), with and without a JSON-schema
// grammar, greedy and sampled at temperature 1. The grammar's share of a
// decode step is 1 - with/without. Each output is first checked to be
// JSON of the schema's prefix (the generation stops at 128 tokens).
func BenchmarkGrammarDecode(b *testing.B) {
	for _, backend := range []string{modrun.BackendCPU, modrun.BackendVulkan} {
		b.Run(backend, func(b *testing.B) { benchGrammarDecode(b, backend) })
	}
}

func benchGrammarDecode(b *testing.B, backend string) {
	if backend == modrun.BackendVulkan {
		if err := vk.Load(); err != nil {
			b.Skipf("no Vulkan loader: %v", err)
		}
	}
	m := synthModel(b, "stories15m", modrun.Options{Backend: backend})
	if m.Info().Backend != backend {
		b.Skipf("%s: not available (%s)", backend, m.Info().Backend)
	}
	g, err := modrun.JSONSchemaGrammar([]byte(benchSchema))
	require.NoError(b, err)
	const n = 128
	for _, tc := range []struct {
		name string
		opts modrun.GenerateOptions
	}{
		{"greedy/none", modrun.GenerateOptions{MaxTokens: n, IgnoreEOS: true}},
		{"greedy/json-schema", modrun.GenerateOptions{MaxTokens: n, Grammar: g}},
		{"temp1/none", modrun.GenerateOptions{MaxTokens: n, IgnoreEOS: true, Temperature: 1, Seed: 1}},
		{"temp1/json-schema", modrun.GenerateOptions{MaxTokens: n, Grammar: g, Temperature: 1, Seed: 1}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			text, res := benchGenerate(b, m, tc.opts)
			require.Equal(b, n, res.Tokens, "%q", text)
			if tc.opts.Grammar != nil {
				var v []any
				require.Error(b, json.Unmarshal([]byte(text), &v), "cut at %d tokens: a prefix", n)
				require.Equal(b, byte('['), text[0])
			}
			b.ResetTimer()
			var tokens, secs float64
			for i := 0; i < b.N; i++ {
				_, res := benchGenerate(b, m, tc.opts)
				tokens += float64(res.DecodeSteps)
				secs += res.Decode.Seconds()
			}
			b.ReportMetric(tokens/secs, "tokens/s")
		})
	}
}

// BenchmarkGrammarStep: the grammar's own work per token, as the sampler
// does it at temperature 1 (a mask over the 32,000 tokens, then the
// token's acceptance), replayed over a recorded 128-token JSON-schema
// generation of the random-weight stories15M, from a fresh Matcher each
// time (a request's). Against BenchmarkGrammarDecode's decode step it is
// the grammar's share of a step, without the model's noise.
func BenchmarkGrammarStep(b *testing.B) {
	m := synthModel(b, "stories15m", modrun.Options{Backend: modrun.BackendCPU})
	g, err := modrun.JSONSchemaGrammar([]byte(benchSchema))
	require.NoError(b, err)
	s := m.NewSession()
	var ids []int32
	_, err = s.Generate(context.Background(), "Once upon a time", modrun.GenerateOptions{MaxTokens: 128, Grammar: g, Temperature: 1, Seed: 1}, func(t modrun.Token) error {
		if !t.Prompt {
			ids = append(ids, t.ID)
		}
		return nil
	})
	require.NoError(b, err)
	s.Close()
	f, err := gguf.Open(m.Info().Path)
	require.NoError(b, err)
	tok, err := tokenizer.FromGGUF(f)
	f.Close()
	require.NoError(b, err)
	v, err := grammar.FromTokenizer(tok)
	require.NoError(b, err)
	mask := make([]uint64, (v.Len()+63)/64)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		mt := grammar.NewMatcher(g, v)
		for _, id := range ids {
			mt.Mask(mask)
			if err := mt.Accept(id); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids)), "ns/token")
}

func benchGenerate(b *testing.B, m *modrun.Model, opts modrun.GenerateOptions) (string, modrun.Result) {
	s := m.NewSession()
	defer s.Close()
	var text []byte
	res, err := s.Generate(context.Background(), "Once upon a time", opts, func(t modrun.Token) error {
		if !t.Prompt {
			text = append(text, t.Text...)
		}
		return nil
	})
	require.NoError(b, err)
	return string(text) + res.Tail, res
}
