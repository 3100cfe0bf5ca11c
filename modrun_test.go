package modrun_test

import (
	"context"
	"errors"
	"go/doc"
	"go/parser"
	"go/token"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modrun/modrun"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const shipped = "models/tinystories-mod.gguf"

func open(t *testing.T, opts modrun.Options) *modrun.Model {
	t.Helper()
	m, err := modrun.Open(shipped, opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	return m
}

// run generates from a fresh session and returns every token delivered.
func run(t *testing.T, m *modrun.Model, prompt string, n int) ([]modrun.Token, modrun.Result) {
	t.Helper()
	s := m.NewSession()
	defer s.Close()
	var toks []modrun.Token
	res, err := s.Generate(context.Background(), prompt, modrun.GenerateOptions{MaxTokens: n}, func(tk modrun.Token) error {
		toks = append(toks, tk)
		return nil
	})
	require.NoError(t, err)
	return toks, res
}

// vulkanOrSkip opens the shipped model on the Vulkan backend (lavapipe
// here), or skips.
func vulkanOrSkip(t *testing.T, routing modrun.Routing) *modrun.Model {
	t.Helper()
	if err := vk.Load(); err != nil {
		t.Skipf("no Vulkan loader: %v", err)
	}
	m, err := modrun.Open(shipped, modrun.Options{Backend: modrun.BackendVulkan, Routing: routing})
	if err != nil {
		t.Skipf("no Vulkan device: %v", err)
	}
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	return m
}

func TestModelInfo(t *testing.T) {
	info := open(t, modrun.Options{Backend: modrun.BackendCPU}).Info()
	assert.Equal(t, "llama-mod", info.Arch)
	assert.Equal(t, 9, info.NLayer)
	assert.Equal(t, []int{1, 3, 5, 7}, info.RoutedLayers)
	assert.Equal(t, modrun.RoutingRouter, info.Routing)
	assert.Equal(t, modrun.BackendCPU, info.Backend)
	assert.Contains(t, info.Device, "CPU")
	assert.Positive(t, info.FileBytes)
	assert.Zero(t, info.GPUWeights)

	small := open(t, modrun.Options{Backend: modrun.BackendCPU, ContextLen: 16}).Info()
	assert.Equal(t, 16, small.ContextLen)
}

// TestNoRoutes: without routes the tokens and the per-layer counts are the
// same (on the GPU too: the counts come from the KV caches).
func TestNoRoutes(t *testing.T) {
	want, wres := run(t, open(t, modrun.Options{Backend: modrun.BackendCPU}), "Once upon", 20)
	backends := []string{modrun.BackendCPU}
	if vk.Load() == nil {
		backends = append(backends, modrun.BackendVulkan)
	}
	for _, b := range backends {
		m, err := modrun.Open(shipped, modrun.Options{Backend: b, NoRoutes: true})
		if b == modrun.BackendVulkan && err != nil {
			t.Skipf("no Vulkan device: %v", err)
		}
		require.NoError(t, err)
		got, res := run(t, m, "Once upon", 20)
		require.NoError(t, m.Close())
		require.Len(t, got, len(want))
		for i := range got {
			assert.Equal(t, want[i].ID, got[i].ID)
			assert.Nil(t, got[i].Routes)
		}
		assert.Equal(t, wres.Layers, res.Layers, b)
	}
}

// TestTokensAndRoutes: the stream holds the prompt (BOS first) then the
// new tokens, positions in order, text that joins into the decoded
// sequence, and routes for every token but the last, whose Selected counts
// add up to the result's per-layer counts.
func TestTokensAndRoutes(t *testing.T) {
	m := open(t, modrun.Options{Backend: modrun.BackendCPU})
	toks, res := run(t, m, "Once upon", 20)
	require.Len(t, toks, res.PromptTokens+20)
	assert.Equal(t, 3, res.PromptTokens, "BOS, Once, upon")
	assert.Equal(t, modrun.StopMaxTokens, res.Stop)
	var text strings.Builder
	counts := map[int]int{}
	for i, tk := range toks {
		assert.Equal(t, i, tk.Pos)
		assert.Equal(t, i < res.PromptTokens, tk.Prompt)
		text.WriteString(tk.Text)
		if i == len(toks)-1 {
			assert.Nil(t, tk.Routes, "the last token has not run yet")
			continue
		}
		require.Len(t, tk.Routes, 4)
		for _, r := range tk.Routes {
			assert.Equal(t, r.Score > 0, r.Selected)
			if r.Selected {
				counts[r.Layer]++
			}
		}
	}
	assert.True(t, strings.HasPrefix(text.String(), "Once upon a time, there was"), text.String())
	require.Len(t, res.Layers, 4)
	for _, l := range res.Layers {
		assert.Equal(t, len(toks)-1, l.Seen, "every token but the last ran")
		assert.Equal(t, counts[l.Layer], l.Selected, "layer %d", l.Layer)
	}
}

// TestContinueAndSessionsTakeTurns: a session continued by a second call
// gives the tokens one longer call gives, even when another session of the
// model ran in between (its sequence is restored).
func TestContinueAndSessionsTakeTurns(t *testing.T) {
	m := open(t, modrun.Options{Backend: modrun.BackendCPU})
	want, _ := run(t, m, "Once upon", 12)

	a, b := m.NewSession(), m.NewSession()
	var got []modrun.Token
	collect := func(tk modrun.Token) error { got = append(got, tk); return nil }
	_, err := a.Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 6}, collect)
	require.NoError(t, err)
	_, err = b.Generate(context.Background(), "Lily", modrun.GenerateOptions{MaxTokens: 5}, nil)
	require.NoError(t, err)
	_, err = a.Generate(context.Background(), "", modrun.GenerateOptions{MaxTokens: 6}, collect)
	require.NoError(t, err)
	ids := func(ts []modrun.Token) (out []int32) {
		for _, tk := range ts {
			out = append(out, tk.ID)
		}
		return out
	}
	assert.Equal(t, ids(want), ids(got))
	seq, err := a.Tokens()
	require.NoError(t, err)
	assert.Equal(t, ids(want), seq)

	require.NoError(t, a.Reset())
	again, err := a.Tokens()
	require.NoError(t, err)
	assert.Empty(t, again)

	// Two sessions from two goroutines: they take turns, each as if alone.
	var wg sync.WaitGroup
	outs := make([][]int32, 2)
	for i, s := range []*modrun.Session{a, b} {
		require.NoError(t, s.Reset())
		wg.Add(1)
		go func() {
			defer wg.Done()
			var toks []modrun.Token
			_, err := s.Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 12}, func(tk modrun.Token) error {
				toks = append(toks, tk)
				return nil
			})
			assert.NoError(t, err)
			outs[i] = ids(toks)
		}()
	}
	wg.Wait()
	assert.Equal(t, ids(want), outs[0])
	assert.Equal(t, ids(want), outs[1])
}

// TestConcurrentGenerateIsAnError: while a session generates, its own
// Generate, Reset and Close return ErrBusy (run with -race).
func TestConcurrentGenerateIsAnError(t *testing.T) {
	m := open(t, modrun.Options{Backend: modrun.BackendCPU})
	s := m.NewSession()
	inside := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error)
	go func() {
		first := true
		_, err := s.Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 5}, func(modrun.Token) error {
			if first {
				first = false
				close(inside)
				<-release
			}
			return nil
		})
		done <- err
	}()
	<-inside
	_, err := s.Generate(context.Background(), "Lily", modrun.GenerateOptions{}, nil)
	assert.ErrorIs(t, err, modrun.ErrBusy)
	assert.ErrorIs(t, s.Reset(), modrun.ErrBusy)
	assert.ErrorIs(t, s.Close(), modrun.ErrBusy)
	close(release)
	require.NoError(t, <-done)
	require.NoError(t, s.Close())
	_, err = s.Generate(context.Background(), "Lily", modrun.GenerateOptions{}, nil)
	assert.ErrorIs(t, err, modrun.ErrClosed)
}

func TestStops(t *testing.T) {
	m := open(t, modrun.Options{Backend: modrun.BackendCPU, ContextLen: 10})
	s := m.NewSession()
	res, err := s.Generate(context.Background(), "Once upon", modrun.GenerateOptions{}, nil)
	require.NoError(t, err)
	assert.Equal(t, modrun.StopContextFull, res.Stop)
	assert.Equal(t, 8, res.Tokens, "3 prompt tokens, 7 run and the 8th drawn fill 10")
	_, err = s.Generate(context.Background(), "more", modrun.GenerateOptions{}, nil)
	assert.ErrorContains(t, err, "more than the context length 10")

	n := 0
	res, err = m.NewSession().Generate(context.Background(), "Once upon", modrun.GenerateOptions{}, func(tk modrun.Token) error {
		if !tk.Prompt {
			n++
		}
		if n == 2 {
			return modrun.ErrStop
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, modrun.StopCallback, res.Stop)
	assert.Equal(t, 2, res.Tokens)

	boom := errors.New("boom")
	_, err = m.NewSession().Generate(context.Background(), "Once", modrun.GenerateOptions{}, func(modrun.Token) error { return boom })
	assert.ErrorIs(t, err, boom)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = m.NewSession().Generate(ctx, "Once", modrun.GenerateOptions{}, nil)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestSampling(t *testing.T) {
	m := open(t, modrun.Options{Backend: modrun.BackendCPU})
	gen := func(seed uint64) string {
		var b strings.Builder
		_, err := m.NewSession().Generate(context.Background(), "Lily", modrun.GenerateOptions{MaxTokens: 30, Temperature: 0.9, TopP: 0.9, Seed: seed},
			func(tk modrun.Token) error { b.WriteString(tk.Text); return nil })
		require.NoError(t, err)
		return b.String()
	}
	assert.Equal(t, gen(5), gen(5))
	assert.NotEqual(t, gen(5), gen(6))
	_, err := m.NewSession().Generate(context.Background(), "x", modrun.GenerateOptions{Temperature: -1}, nil)
	assert.ErrorContains(t, err, "Temperature -1: must be 0 (greedy) or positive")
}

// TestExactSampler: GenerateOptions.Sampler is used as it is: the same
// choice as the fields with their defaults spelt out, and no zero value
// read as a default (TopP 0 is refused, RepeatLastN 0 is no penalty).
func TestExactSampler(t *testing.T) {
	m := open(t, modrun.Options{Backend: modrun.BackendCPU})
	gen := func(o modrun.GenerateOptions) (string, error) {
		var b strings.Builder
		o.MaxTokens = 30
		_, err := m.NewSession().Generate(context.Background(), "Lily", o, func(tk modrun.Token) error { b.WriteString(tk.Text); return nil })
		return b.String(), err
	}
	fields, err := gen(modrun.GenerateOptions{Temperature: 0.9, RepeatPenalty: 3, RepeatLastN: -1, Seed: 7})
	require.NoError(t, err)
	exact, err := gen(modrun.GenerateOptions{Sampler: &modrun.SamplerOptions{Temperature: 0.9, TopP: 1, RepeatPenalty: 3, Seed: 7}})
	require.NoError(t, err)
	assert.Equal(t, fields, exact, "RepeatLastN 0 there is -1 here: no penalty")
	penalised, err := gen(modrun.GenerateOptions{Temperature: 0.9, RepeatPenalty: 3, Seed: 7})
	require.NoError(t, err)
	assert.NotEqual(t, exact, penalised, "the fields' RepeatLastN 0 is 64 tokens of penalty")
	_, err = gen(modrun.GenerateOptions{Sampler: &modrun.SamplerOptions{RepeatPenalty: 1}})
	assert.ErrorContains(t, err, "TopP 0: must be in (0, 1]")
}

func TestOpenErrors(t *testing.T) {
	for _, c := range []struct {
		path string
		opts modrun.Options
		want string
	}{
		{shipped, modrun.Options{Backend: "gpu"}, `Backend "gpu" is not auto, cpu, reference or vulkan`},
		{shipped, modrun.Options{Device: "first"}, `Device "first" is not a device index`},
		{shipped, modrun.Options{Routing: "topk"}, `Routing "topk" is not router or predictor`},
		{shipped, modrun.Options{KVType: "q8"}, `KVType "q8" is not f16 or f32`},
		{shipped, modrun.Options{ContextLen: 100000}, "ContextLen 100000: must be in [1, 512], the context length of " + shipped},
		{shipped, modrun.Options{ContextLen: -1}, "ContextLen -1"},
		{"testdata/mod/mod-rand-identity-bias.gguf", modrun.Options{Routing: modrun.RoutingPredictor}, "has no predictor"},
		{filepath.Join(t.TempDir(), "none.gguf"), modrun.Options{}, "none.gguf"},
	} {
		m, err := modrun.Open(c.path, c.opts)
		assert.Nil(t, m)
		assert.ErrorContains(t, err, c.want)
	}
}

// TestVulkanAgreesWithCPU: on Vulkan (lavapipe here) the stream is the
// CPU's: the same tokens and text, the same routing decisions where the
// score is not within 1e-4 of 0, and the scores within 1e-4.
func TestVulkanAgreesWithCPU(t *testing.T) {
	for _, routing := range []modrun.Routing{modrun.RoutingRouter, modrun.RoutingPredictor} {
		gpu := vulkanOrSkip(t, routing)
		info := gpu.Info()
		assert.Equal(t, modrun.BackendVulkan, info.Backend)
		assert.Equal(t, routing, info.Routing)
		assert.Positive(t, info.GPUWeights)
		assert.Positive(t, info.GPUKVCache)
		cpu := open(t, modrun.Options{Backend: modrun.BackendCPU, Routing: routing})
		want, wres := run(t, cpu, "Once upon", 40)
		got, gres := run(t, gpu, "Once upon", 40)
		require.Len(t, got, len(want))
		for i := range want {
			assert.Equal(t, want[i].ID, got[i].ID, "%s: token %d", routing, i)
			assert.Equal(t, want[i].Text, got[i].Text)
			require.Len(t, got[i].Routes, len(want[i].Routes))
			for j, w := range want[i].Routes {
				g := got[i].Routes[j]
				assert.InDelta(t, w.Score, g.Score, 1e-4, "%s: token %d layer %d", routing, i, w.Layer)
				if math.Abs(float64(w.Score)) > 1e-4 {
					assert.Equal(t, w.Selected, g.Selected, "%s: token %d layer %d", routing, i, w.Layer)
				}
			}
		}
		assert.Equal(t, wres.Layers, gres.Layers)
	}
}

// TestCloseWhileGenerating: closing the model from another goroutine waits
// for the generation, which the cancelled context stops within a token;
// then everything the model held on the device is freed (Close returns).
func TestCloseWhileGenerating(t *testing.T) {
	for _, backend := range []string{modrun.BackendCPU, modrun.BackendVulkan} {
		t.Run(backend, func(t *testing.T) {
			var m *modrun.Model
			if backend == modrun.BackendVulkan {
				if err := vk.Load(); err != nil {
					t.Skipf("no Vulkan loader: %v", err)
				}
			}
			m, err := modrun.Open(shipped, modrun.Options{Backend: backend})
			if backend == modrun.BackendVulkan && err != nil {
				t.Skipf("no Vulkan device: %v", err)
			}
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			started := make(chan struct{})
			done := make(chan error)
			go func() {
				once := sync.Once{}
				_, err := m.NewSession().Generate(ctx, "Once upon", modrun.GenerateOptions{}, func(modrun.Token) error {
					once.Do(func() { close(started) })
					return nil
				})
				done <- err
			}()
			<-started
			cancel()
			require.NoError(t, m.Close())
			assert.ErrorIs(t, <-done, context.Canceled)
			_, err = m.NewSession().Generate(context.Background(), "x", modrun.GenerateOptions{}, nil)
			assert.ErrorIs(t, err, modrun.ErrClosed)
		})
	}
}

// examples are the runnable examples of example_test.go, by name.
var examples = map[string]func(){
	"":                         Example,
	"Session_Generate_routing": ExampleSession_Generate_routing,
	"Session_Generate_cancel":  ExampleSession_Generate_cancel,
}

// TestExamplesOnVulkan runs the examples with Options{} on lavapipe (or
// whatever device there is): MODRUN_DEVICE makes BackendAuto take even a
// software Vulkan device. Each must print its // Output: lines.
func TestExamplesOnVulkan(t *testing.T) {
	if err := vk.Load(); err != nil {
		t.Skipf("no Vulkan loader: %v", err)
	}
	t.Setenv(vk.EnvDevice, "0")
	m, err := modrun.Open(shipped, modrun.Options{})
	require.NoError(t, err)
	info := m.Info()
	require.NoError(t, m.Close())
	if info.Backend != modrun.BackendVulkan {
		t.Skipf("no Vulkan device: %s", info.Notice)
	}
	t.Logf("running the examples on %s", info.Device)

	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", nil, parser.ParseComments)
	require.NoError(t, err)
	found := doc.Examples(f)
	require.Len(t, found, len(examples))
	for _, ex := range found {
		fn, ok := examples[ex.Name]
		require.True(t, ok, "example %q is in the table", ex.Name)
		assert.Equal(t, strings.TrimSpace(ex.Output), strings.TrimSpace(stdoutOf(t, fn)), "Example%s", ex.Name)
	}
}

// stdoutOf runs fn and returns what it printed.
func stdoutOf(t *testing.T, fn func()) string {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	saved := os.Stdout
	os.Stdout = w
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	defer func() { os.Stdout = saved }()
	fn()
	w.Close()
	os.Stdout = saved
	return <-out
}
