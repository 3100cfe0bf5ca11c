package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/modrun/modrun/internal/shared"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGenerateGreedyStory: `modrun -m stories260K.gguf -p ""` (BOS alone)
// prints llama2.c's greedy story, byte for byte.
func TestGenerateGreedyStory(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	want, err := os.ReadFile(shared.Path(t, "models/stories260K_greedy200_expected.txt"))
	require.NoError(t, err)
	code, out, stderr := modrun(t, "-m", model, "-p", "", "-n", "200", "--stats")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, string(want), out)
	assert.Contains(t, stderr, "decode:  199 tokens") // the first of the 200 comes with the prefill
	assert.Contains(t, stderr, "tokens/s")
}

func TestGeneratePromptAndSeed(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	code, out, stderr := modrun(t, "run", "-m", model, "-p", "Once upon a time", "-n", "20")
	require.Equal(t, 0, code, stderr)
	assert.True(t, strings.HasPrefix(out, "Once upon a time, there was a little girl named Lily."), out)

	args := []string{"-m", model, "-p", "Lily", "-n", "30", "--temp", "0.9", "--top-p", "0.9", "--top-k", "40", "--seed", "5"}
	_, a, _ := modrun(t, args...)
	_, b, _ := modrun(t, args...)
	assert.Equal(t, a, b, "the same seed gives the same text")
	args[len(args)-1] = "6"
	_, c, _ := modrun(t, args...)
	assert.NotEqual(t, a, c, "another seed gives another text")
}

func TestGenerateBadInput(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-p", "x"}, 2, "-m FILE.gguf is required"},
		{[]string{"-m", model, "-p", strings.Repeat("a b ", 1200)}, 2, "-p: the prompt has 2402 tokens, more than the context length 2048: shorten -p, or raise --ctx"}, // BOS, 2400 words, a final space
		{[]string{"-m", model, "-p", "x", "--routing", "router"}, 1, "--routing router: " + model + " is a dense model"},
		{[]string{"-m", model, "-p", "x", "--routing", "sideways"}, 2, `--routing "sideways": want router or predictor`},
		{[]string{"-m", model, "-p", "x", "--temp", "-1"}, 2, "--temp -1: must be 0 (greedy) or positive"},
		{[]string{"-m", model, "-p", "x", "--top-p", "0"}, 2, "--top-p 0: must be in (0, 1]"},
		{[]string{"-m", model, "-p", "x", "--backend", "gpu"}, 2, `--backend "gpu" is not auto, cpu, reference or vulkan`},
		{[]string{"-m", model, "-p", "x", "-n", "-3"}, 2, "-n -3: must be -1 (until the end), 0 (the same) or positive"},
		{[]string{"-m", model, "-p", "x", "stray"}, 2, `unexpected argument "stray"`},
		{[]string{"-m", model, "-p", "x", "--kv-type", "q8"}, 2, `--kv-type "q8" is not f16 or f32`},
		{[]string{"-m", model, "-p", "x", "--ubatch", "0"}, 2, `--ubatch 0: must be at least 1`},
		{[]string{"-m", model, "-p", "x", "--ctx", "5000"}, 2, "--ctx 5000: must be in [1, 2048]"},
		{[]string{"-m", model, "-p", "x", "-c", "-1"}, 2, "--ctx -1: must be positive"},
		{[]string{"-m", model, "-p", "Once upon a time there", "-c", "4"}, 2, "-p: the prompt has 6 tokens, more than the context length 4: shorten -p, or raise --ctx"},
		{[]string{"-m", filepath.Join(t.TempDir(), "none.gguf"), "-p", "x"}, 1, "none.gguf"},
	}
	for _, c := range cases {
		code, _, stderr := modrun(t, c.args...)
		assert.Equal(t, c.code, code, stderr)
		assert.Contains(t, stderr, c.want)
	}
}

// TestGenerateContext: --ctx caps the sequence (and sizes the GPU's KV
// cache) on both backends, and --kv-type picks the GPU cache's type.
func TestGenerateContext(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	code, cpuOut, stderr := modrun(t, "-m", model, "-p", "Once upon", "-n", "100", "--ctx", "12", "--backend", "cpu")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "filled the context length (12 tokens")

	if err := vk.Load(); err != nil {
		t.Skipf("no Vulkan loader: %v", err)
	}
	for _, kv := range []string{"f32", "f16"} {
		code, out, stderr := modrun(t, "-m", model, "-p", "Once upon", "-n", "100", "-c", "12", "--kv-type", kv, "--backend", "vulkan", "--stats")
		if code != 0 && strings.Contains(stderr, "no Vulkan device") {
			t.Skipf("no Vulkan device: %s", stderr)
		}
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, stderr, "filled the context length (12 tokens")
		assert.Contains(t, stderr, "KV cache: "+kv+", 12 tokens")
		if kv == "f32" {
			assert.Equal(t, cpuOut, out, "greedy text as the CPU's")
		}
	}
}

func TestPerplexity(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	text := filepath.Join(t.TempDir(), "story.txt")
	require.NoError(t, os.WriteFile(text, []byte("Once upon a time, there was a little girl named Lily. She loved to play outside in the park.\n"), 0o644))
	code, out, stderr := modrun(t, "perplexity", "-m", model, "-f", text, "--ctx", "16")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "routing dense")
	// 32 tokens in windows of BOS + 15; the model knows this story well, so
	// far better than chance (log 512 = 6.2 nats).
	m := regexp.MustCompile(`32 tokens in 3 windows of at most 16: NLL (\d+\.\d+) nats/token`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	nll, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	assert.Less(t, nll, 2.0)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"perplexity", "-m", model}, "-f TEXT is required"},
		{[]string{"perplexity", "-m", model, "-f", text, "--ctx", "1"}, "--ctx 1: must be at least 2"},
		{[]string{"perplexity", "-m", model, "-f", text, "--capacity", "0"}, "--capacity 0: want a fraction in (0, 1]"},
		{[]string{"perplexity", "-m", model, "-f", filepath.Join(t.TempDir(), "none.txt")}, "none.txt"},
	} {
		code, _, stderr := modrun(t, c.args...)
		assert.NotEqual(t, 0, code, "%v", c.args)
		assert.Contains(t, stderr, c.want, "%v", c.args)
	}
}

// The MoD fixture models of testdata/mod (written by train/, converted by
// modrun convert) carry the stories260K vocabulary.
const (
	modTrained   = "../../testdata/mod/mod-trained.gguf"            // router bias, predictor, capacity 0.5
	modNoPredict = "../../testdata/mod/mod-rand-identity-bias.gguf" // no predictor
)

func TestGenerateMoD(t *testing.T) {
	for _, routing := range []string{"router", "predictor"} {
		code, out, stderr := modrun(t, "-m", modTrained, "-p", "Once upon a time", "-n", "20", "--routing", routing, "--stats")
		require.Equal(t, 0, code, stderr)
		assert.True(t, strings.HasPrefix(out, "Once upon a time"), out)
		assert.Contains(t, stderr, "routing: "+routing)
		// 1 BOS + 4 prompt tokens + 19 fed back = 24 tokens seen by each routed layer.
		assert.Regexp(t, `layer  1: +\d+ of +24 tokens went through \(\d+\.\d%\)`, stderr)
		assert.Regexp(t, `layer  3: +\d+ of +24 tokens went through`, stderr)
	}
	code, _, stderr := modrun(t, "-m", modNoPredict, "-p", "x", "--routing", "predictor")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "--routing predictor: "+modNoPredict+" has no predictor (llama-mod.mod.predictor_hidden = 0)")
}

func TestPerplexityMoD(t *testing.T) {
	text := filepath.Join(t.TempDir(), "story.txt")
	require.NoError(t, os.WriteFile(text, []byte("Once upon a time there was a girl. She liked to play."), 0o644))
	for routing, want := range map[string]string{
		"topk":      "routing topk (capacity 0.5)",
		"router":    "routing router",
		"predictor": "routing predictor",
	} {
		code, out, stderr := modrun(t, "perplexity", "-m", modTrained, "-f", text, "--routing", routing)
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, out, want)
		assert.Contains(t, out, "tokens in 1 window of at most 512")
	}
	code, out, stderr := modrun(t, "perplexity", "-m", modTrained, "-f", text, "--capacity", "0.25")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "routing topk (capacity 0.25)")
}

// TestGenerateOnVulkan: the greedy story through the Vulkan backend (on
// lavapipe here), byte for byte, with per-layer routing counts for MoD.
func TestGenerateOnVulkan(t *testing.T) {
	if err := vk.Load(); err != nil {
		t.Skipf("no Vulkan loader: %v", err)
	}
	model := shared.Path(t, "models/stories260K.gguf")
	want, err := os.ReadFile(shared.Path(t, "models/stories260K_greedy200_expected.txt"))
	require.NoError(t, err)
	code, out, stderr := modrun(t, "-m", model, "-p", "", "-n", "200", "--backend", "vulkan", "--stats")
	if code != 0 && strings.Contains(stderr, "no Vulkan device") {
		t.Skipf("no Vulkan device: %s", stderr)
	}
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, string(want), out)
	assert.Contains(t, stderr, "backend vulkan: ")
	// Both KV cache types tell the same story (the F16 cache's logits differ
	// by ~1e-3 of their size: no greedy choice here is that close).
	for _, kv := range []string{"f16", "f32"} {
		code, kvOut, stderr := modrun(t, "-m", model, "-p", "", "-n", "200", "--backend", "vulkan", "--kv-type", kv)
		require.Equal(t, 0, code, stderr)
		assert.Equal(t, string(want), kvOut, "--kv-type %s", kv)
	}
	assert.Regexp(t, `GPU memory: [\d.]+ MiB \(weights [\d.]+ MiB, KV cache [\d.]+ MiB, scratch [\d.]+ MiB\)`, stderr)
	// The decode step's commands: the 5 dense blocks' and the rest's add
	// up (lavapipe's profile: 9 a block; a GPU's: 5).
	counts := regexp.MustCompile(`decode step: (\d+) dispatches/token, (\d+) barriers/token \(a block: (\d+) dispatches, (\d+) barriers; embedding and head: (\d+), (\d+)\)`).FindStringSubmatch(stderr)
	if assert.NotNil(t, counts, stderr) {
		n := make([]int, len(counts))
		for i := 1; i < len(counts); i++ {
			n[i], _ = strconv.Atoi(counts[i])
		}
		assert.Equal(t, n[1], 5*n[3]+n[5], "dispatches")
		assert.Equal(t, n[2], 5*n[4]+n[6], "barriers")
		assert.Contains(t, []int{5, 9}, n[3], "a dense block's dispatches")
	}
	assert.Contains(t, stderr, "decode: up to 4 tokens a submission, one sequence or many (MODRUN_CHAIN: greedy ones, and sampled ones where the device draws: a temperature, top-p, min-p); a prompt of 2 tokens or more is a prefill (MODRUN_PROMPT_STEPS)")
	// A long prompt tells the same story whether it runs token by token
	// (--ubatch 1), in batches of 7, or whole (the default 512).
	prompt := string(want[:300])
	var byUBatch []string
	for _, ub := range []string{"1", "7", "512"} {
		code, out, stderr := modrun(t, "-m", model, "-p", prompt, "-n", "40", "--backend", "vulkan", "--ubatch", ub)
		require.Equal(t, 0, code, stderr)
		byUBatch = append(byUBatch, out)
	}
	assert.Equal(t, byUBatch[2], byUBatch[0], "--ubatch 1")
	assert.Equal(t, byUBatch[2], byUBatch[1], "--ubatch 7")
	assert.True(t, strings.HasPrefix(byUBatch[2], prompt), "the prompt is echoed first")

	code, _, stderr = modrun(t, "-m", modTrained, "-p", "Once upon a time", "-n", "20", "--backend", "vulkan", "--stats")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `layer  1: +\d+ of +24 tokens went through`, stderr)

	code, _, stderr = modrun(t, "-m", model, "-p", "x", "--backend", "vulkan", "--device", "99")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "--device 99: no such device")
}

// TestGenerateProfile: --profile prints a per-kernel table on Vulkan and
// the same text as without it; the CPU backend named with it is refused in
// one line.
func TestGenerateProfile(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	code, _, stderr := modrun(t, "-m", model, "-p", "x", "-n", "3", "--backend", "cpu", "--profile")
	require.Equal(t, 2, code, stderr)
	assert.Equal(t, "modrun run: usage: --profile applies to the vulkan backend only, not to cpu\n", stderr)

	if err := vk.Load(); err != nil {
		t.Skipf("no Vulkan loader: %v", err)
	}
	// A prompt past 8 tokens, so that it goes through the batched prefill
	// (shorter ones run token by token through the decode step).
	const prompt = "Once upon a time there was a little girl named Lily"
	_, plain, _ := modrun(t, "-m", model, "-p", prompt, "-n", "10", "--backend", "vulkan")
	code, out, stderr := modrun(t, "-m", model, "-p", prompt, "-n", "10", "--backend", "vulkan", "--profile")
	if code != 0 && strings.Contains(stderr, "no Vulkan device") {
		t.Skipf("no Vulkan device: %s", stderr)
	}
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, plain, out)
	if strings.Contains(stderr, "cannot write GPU timestamps") {
		t.Skipf("the device has no timestamps: %s", stderr)
	}
	assert.Regexp(t, `(?m)^peaks \(compute probe\): fp32 [\d.e+-]+ TFLOP/s, tensor (none \(.+\)|[\d.e+-]+ TFLOP/s)\n`, stderr)
	assert.Regexp(t, `(?m)^bandwidth \(probe\): [\d.]+ GB/s read\n`, stderr)
	assert.Regexp(t, `kernel +calls +total ms +us/call +% +MB/call +GB/s +of BW +FLOP/call +TFLOP/s +path +of peak\n`, stderr)
	// BOS and the prompt in one batched prefill (one embed), then 9 fed
	// back: 10 embeds. A GPU's profile picks the subgroup matvec, fused
	// with the norms and residual adds, decode_attend and the F16 cache. A
	// matvec's row has its weights' MB per call and GB/s, and like the
	// matmuls and attention its FLOPs per call, TFLOP/s, path and share of
	// that path's peak; another kernel's row has dashes.
	num := `[\d.]+[kMGT]?`
	assert.Regexp(t, `\nmatvec_f32(_sg)?(_add|_norm|_norm_swiglu)? +\d+ +[\d.]+ +[\d.]+ +[\d.]+% +[\d.]+ +[\d.]+ +[\d.]+% +`+num+` +[\d.e+-]+ +fp32 +[\d.]+%\n`, stderr)
	assert.Regexp(t, `\nembed_f32 +10 +[\d.]+ +[\d.]+ +[\d.]+% +- +- +- +- +- +- +-\n`, stderr)
	assert.Regexp(t, `\nmatmul_f32 +\d+ .* fp32 +[\d.]+%\n`, stderr)
	assert.Regexp(t, `\ndecode_atten(tion|d)(_f16)? +\d+ .* fp32 +[\d.]+%\n`, stderr)
	assert.Regexp(t, `\nattention_split_counts(_f16)? +\d+ .* fp32 +[\d.]+%\n`, stderr)
	// The columns agree: FLOP/call over us/call is TFLOP/s, and TFLOP/s
	// over the fp32 peak is the share (each printed to 3 digits).
	peak, err := strconv.ParseFloat(regexp.MustCompile(`fp32 ([\d.e+-]+) TFLOP/s`).FindStringSubmatch(stderr)[1], 64)
	require.NoError(t, err)
	row := regexp.MustCompile(`(?m)^(\S+) +\d+ +[\d.]+ +([\d.]+) +[\d.]+% +\S+ +\S+ +\S+ +([\d.]+)([kMGT]?) +([\d.e+-]+) +fp32 +([\d.]+)%$`)
	rows := row.FindAllStringSubmatch(stderr, -1)
	assert.GreaterOrEqual(t, len(rows), 4, "matmul, matvec and attention rows:\n%s", stderr)
	for _, m := range rows {
		usCall, _ := strconv.ParseFloat(m[2], 64)
		flop, _ := strconv.ParseFloat(m[3], 64)
		flop *= map[string]float64{"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m[4]]
		tflops, _ := strconv.ParseFloat(m[5], 64)
		ofPeak, _ := strconv.ParseFloat(m[6], 64)
		assert.InEpsilon(t, flop/usCall/1e6, tflops, 0.02, "%s: FLOP/call / us/call", m[1])
		assert.InDelta(t, 100*tflops/peak, ofPeak, 0.05+0.02*ofPeak, "%s: TFLOP/s / peak", m[1])
	}
	assert.Regexp(t, `\nGPU total +[\d.]+\n`, stderr)
	// The kernels' share of the generation's wall time: GPU total over it.
	gpu, err := strconv.ParseFloat(regexp.MustCompile(`\nGPU total +([\d.]+)\n`).FindStringSubmatch(stderr)[1], 64)
	require.NoError(t, err)
	m := regexp.MustCompile(`\nwall \(prefill and decode\) ([\d.]+) ms: the kernels ([\d.]+)% of it; the rest \(([\d.]+) ms\) is no kernel's: barriers, launches, the host\n`).FindStringSubmatch(stderr)
	require.NotNil(t, m, stderr)
	wall, _ := strconv.ParseFloat(m[1], 64)
	share, _ := strconv.ParseFloat(m[2], 64)
	rest, _ := strconv.ParseFloat(m[3], 64)
	assert.InDelta(t, 100*gpu/wall, share, 0.06, "the kernels' share")
	assert.InDelta(t, math.Max(0, wall-gpu), rest, 0.002, "the rest")
	// of BW is GB/s over the probe's rate.
	bwRate, err := strconv.ParseFloat(regexp.MustCompile(`bandwidth \(probe\): ([\d.]+) GB/s`).FindStringSubmatch(stderr)[1], 64)
	require.NoError(t, err)
	bwRows := regexp.MustCompile(`(?m)^(\S+) +\d+ +[\d.]+ +[\d.]+ +[\d.]+% +[\d.]+ +([\d.]+) +([\d.]+)% `).FindAllStringSubmatch(stderr, -1)
	assert.NotEmpty(t, bwRows, "matvec rows with a bandwidth share:\n%s", stderr)
	for _, m := range bwRows {
		gbs, _ := strconv.ParseFloat(m[2], 64)
		of, _ := strconv.ParseFloat(m[3], 64)
		// GB/s and the probe's rate are printed to 0.1 and the share to
		// 0.1%: all three roundings (on lavapipe the probe reads ~1 GB/s,
		// where its own rounding moves the share by up to 5%).
		tol := 100*0.05/bwRate + 100*(gbs+0.05)*0.05/(bwRate*(bwRate-0.05)) + 0.05
		assert.InDelta(t, 100*gbs/bwRate, of, tol, "%s: GB/s / probe", m[1])
	}
}

func TestBench(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bench.md")
	code, stdout, stderr := modrun(t, "bench", "-m", modNoPredict, "-m", modTrained, "--backends", "cpu", "--prompt", "8", "-n", "8", "--repeats", "1", "--out", out)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "| "+modTrained+" | router | cpu (f32 KV) | ")
	assert.Contains(t, stdout, "| "+modTrained+" | predictor | cpu (f32 KV) | ")
	assert.Regexp(t, `\| `+regexp.QuoteMeta(modNoPredict)+` \| router \| cpu \(f32 KV\) \| \d+ \| [\d.e+-]+ \| — \| — \| — \| [\d.]+ \| — \| — \| — \| [\d.]+ \| [\d.]+ \| \d+, \d+ \| 16 after 8 \| 100% \| [\d.e-]+ \| [\d.e-]+ \| (0|[\d.]+e-0[6-9]) \(`, stdout) // F32 weights: float32 rounding only
	assert.NotContains(t, stdout, "| "+modNoPredict+" | predictor", "a model without a predictor is benched with the router alone")
	written, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, stdout, string(written))

	code, _, stderr = modrun(t, "bench", "-m", modNoPredict, "--backends", "cpu", "--routing", "predictor")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "has no predictor")
	code, _, stderr = modrun(t, "bench")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "give a model: -m FILE.gguf or --synthetic SHAPE")
	for _, bad := range [][]string{
		{"--synthetic", "gpt5"}, {"--synthetic", "stories260k", "--type", "q4_k_xl"},
		{"--synthetic", "stories260k", "--capacity", "1.5"}, {"-m", modTrained, "--capacity", "0.1"},
		{"-m", modTrained, "--save", "x.gguf"}, {"-m", modTrained, "--backends", "metal"},
	} {
		code, _, stderr = modrun(t, append([]string{"bench"}, bad...)...)
		assert.Equal(t, 2, code, "%v: %s", bad, stderr)
	}
}

// A synthetic model and its MoD twin are built, saved, benched on the CPU
// with the bandwidth columns and the JSON report; the saved dense file is a
// plain llama GGUF with llama.cpp's tensor names.
func TestBenchSynthetic(t *testing.T) {
	dir := t.TempDir()
	save, js := filepath.Join(dir, "s.gguf"), filepath.Join(dir, "bench.json")
	code, stdout, stderr := modrun(t, "bench", "--synthetic", "stories260k", "--type", "q8_0", "--capacity", "0.25", "--backends", "cpu",
		"--prompt", "16", "-n", "16", "--repeats", "1", "--save", save, "--json-out", js)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `\| cpu \| cpu \| go[\d.]+ \| [\d.]+ GB/s \| Go probe`, stdout)
	assert.Regexp(t, `\| stories260k-q8_0 \| dense \| cpu \(f32 KV\) \| \d+ \| [\d.e+-]+ \| — \| — \| — \| [\d.]+ \| — \| — \| — \| [\d.]+ \| [\d.]+ \| dense \| 16 after 16 \| 100% \| [\d.e-]+ \| [\d.e-]+ \| 0\.0\d+ \(`, stdout) // 8-bit activations
	assert.Regexp(t, `\| stories260k-q8_0-mod \| router \| cpu \(f32 KV\) \| \d+ \| [\d.e+-]+ \| — \| [\d.]+ \| 1\.\d\d \| [\d.]+ \| [\d.]+ \| 1\.\d\d \| — \| [\d.]+ \| [\d.]+ \| \d+, \d+ \| 16 after 16 \| 100% \| [\d.e-]+ \| [\d.e-]+ \| 0\.0\d+ \(`, stdout)
	assert.Contains(t, stdout, "| stories260k-q8_0-mod | predictor | cpu (f32 KV) |")
	assert.Contains(t, stdout, "`of ideal` is left out: it needs --repeats 3 or more", "one run's share of the ideal is noise")

	var rep benchReport
	b, err := os.ReadFile(js)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Len(t, rep.Rows, 3)
	assert.Equal(t, "stories260k-q8_0", rep.Rows[1].Baseline)
	assert.Greater(t, rep.Rows[1].IdealVsBaseline, 1.0, "the twin reads fewer bytes per token")
	assert.Greater(t, rep.Rows[1].IdealPrefillVsBaseline, 1.0, "and does less arithmetic")
	assert.Positive(t, rep.Rows[0].EffectiveGBps)
	// Prefill TFLOP/s is the model's FLOPs per token times tokens/s; the
	// CPU backends have no compute probe, so no path and no share of one.
	assert.InEpsilon(t, rep.Rows[0].PrefillFLOPs*rep.Rows[0].PrefillRate/1e12, rep.Rows[0].PrefillTFLOPs, 1e-9)
	assert.Empty(t, rep.Rows[0].PrefillPath)
	assert.Zero(t, rep.Rows[0].PrefillPercentOfPeak)
	require.Len(t, rep.Peaks, 1)
	assert.Equal(t, "cpu", rep.Peaks[0].Device)
	assert.Regexp(t, `\| cpu \| cpu \| — \| — \| no compute probe on the CPU backends \|`, stdout)

	// --json prints the same report as one document on stdout instead.
	code, stdout, stderr = modrun(t, "bench", "--synthetic", "stories260k", "--backends", "cpu", "--prompt", "16", "-n", "16", "--repeats", "1", "--json")
	require.Equal(t, 0, code, stderr)
	var onStdout benchReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &onStdout), stdout)
	assert.Len(t, onStdout.Rows, 1)
	assert.Positive(t, rep.Devices[0].GBps)
	assert.Len(t, rep.Rows[1].RoutedPercent, 2)

	code, out, stderr := modrun(t, "inspect", strings.TrimSuffix(save, ".gguf")+"-stories260k-q8_0.gguf")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "architecture:  llama\n")
	assert.Regexp(t, `blk\.4\.ffn_down\.weight +F16 +\[172, 64\]`, out, "172 columns are no Q8_0 blocks: F16, as llama.cpp falls back")
	assert.Regexp(t, `blk\.4\.attn_k\.weight +Q8_0 +\[64, 32\]`, out)
	code, out, stderr = modrun(t, "inspect", strings.TrimSuffix(save, ".gguf")+"-stories260k-q8_0-mod.gguf")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "architecture:  llama-mod\n")
	assert.Contains(t, out, "blk.3.mod_pred_up.weight")
}

// TestBenchPeaks: on Vulkan the bench probes the device's FP32 peak (and
// says why there is no tensor one on lavapipe), and a prefill row's
// TFLOP/s is a share of the peak of the path its matmuls took.
func TestBenchPeaks(t *testing.T) {
	if err := vk.Load(); err != nil {
		t.Skipf("no Vulkan loader: %v", err)
	}
	code, stdout, stderr := modrun(t, "bench", "--synthetic", "stories260k", "--type", "f32", "--backends", "vulkan",
		"--prompt", "16", "-n", "4", "--repeats", "1", "--validate", "0", "--json")
	if code != 0 && strings.Contains(stderr, "no Vulkan device") {
		t.Skipf("no Vulkan device: %s", stderr)
	}
	require.Equal(t, 0, code, stderr)
	var rep benchReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	require.Len(t, rep.Peaks, 1)
	pk := rep.Peaks[0]
	assert.Positive(t, pk.FP32TFLOPs)
	assert.True(t, pk.TensorTFLOPs > 0 || pk.NoTensor != "", "a tensor peak, or why there is none: %+v", pk)
	require.Len(t, rep.Rows, 1)
	r := rep.Rows[0]
	require.Contains(t, []string{"fp32", "tensor"}, r.PrefillPath)
	peak := pk.FP32TFLOPs
	if r.PrefillPath == "tensor" {
		peak = pk.TensorTFLOPs
	}
	assert.InEpsilon(t, 100*r.PrefillTFLOPs/peak, r.PrefillPercentOfPeak, 1e-9)
}

// TestPerplexityOnVulkan: eval mode and causal routing (router, predictor:
// the batched prefill) on the GPU give the CPU's NLL to the 4 decimals
// printed.
func TestPerplexityOnVulkan(t *testing.T) {
	if err := vk.Load(); err != nil {
		t.Skipf("no Vulkan loader: %v", err)
	}
	text := filepath.Join(t.TempDir(), "story.txt")
	require.NoError(t, os.WriteFile(text, []byte("Once upon a time there was a girl. She liked to play with her red ball in the park."), 0o644))
	nll := func(backend, routing string) string {
		code, out, stderr := modrun(t, "perplexity", "-m", modTrained, "-f", text, "--backend", backend, "--routing", routing)
		if code != 0 && strings.Contains(stderr, "no Vulkan device") {
			t.Skipf("no Vulkan device: %s", stderr)
		}
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, out, "backend "+backend)
		return regexp.MustCompile(`NLL (\d+\.\d+)`).FindStringSubmatch(out)[1]
	}
	for _, routing := range []string{"topk", "router", "predictor"} {
		assert.Equal(t, nll("cpu", routing), nll("vulkan", routing), "%s: NLL to 4 decimals", routing)
	}
}
