package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/shared"
	"github.com/modrun/modrun/vk"
)

// cliCase is one command line, the exit status it must give, what stderr
// must say, and what it must not (another flag, Go's internals, work done
// before the check).
type cliCase struct {
	name  string
	args  []string
	code  int
	want  string
	never []string
}

func runCLICases(t *testing.T, cases []cliCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := modrun(t, c.args...)
			assert.Equal(t, c.code, code, "stderr: %s", stderr)
			assert.Contains(t, stderr, c.want)
			for _, s := range append(c.never, "strconv.", "types.", "panic", "goroutine") {
				assert.NotContains(t, stderr, s)
			}
			if c.code != 0 {
				assert.Empty(t, stdout, "nothing is generated or printed before an error in the flags")
			}
			for _, line := range strings.Split(stderr, "\n") {
				if strings.Contains(line, c.want) {
					assert.True(t, strings.HasPrefix(line, "modrun"), "the error line starts with modrun: %q", line)
				}
			}
		})
	}
}

// TestFlagErrorsComeFirst: every flag and path is checked before a model is
// loaded or built, and the error names the flag: exit 2 for a value no run
// could take, 1 for a path that does not serve. The -m of several cases does
// not exist, so an error about it would show the flags were checked too late.
func TestFlagErrorsComeFirst(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.gguf")
	text := filepath.Join(dir, "story.txt")
	require.NoError(t, os.WriteFile(text, []byte("Once upon a time."), 0o644))
	empty := filepath.Join(dir, "empty.gguf")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	noDir := filepath.Join(dir, "no", "such", "dir")
	built := []string{"bench: built", "bench: validating"}

	runCLICases(t, []cliCase{
		// run
		{"run --ctx negative", []string{"-m", missing, "-p", "x", "--ctx", "-1"}, 2, "--ctx -1: must be positive (or 0: the model's)", nil},
		{"run --device negative", []string{"-m", missing, "-p", "x", "--device", "-5"}, 2, "--device -5: want a device index, 0 or more", nil},
		{"run --device -1 is the default", []string{"-m", missing, "-p", "x", "--backend", "cpu", "--device", "-1"}, 1, "-m " + missing + ": no such file", nil},
		{"run --device on the cpu", []string{"-m", missing, "-p", "x", "--backend", "cpu", "--device", "99"}, 2,
			"--device 99 picks a Vulkan device, but the backend is cpu", nil},
		{"run --routing lists what run takes", []string{"-m", missing, "-p", "x", "--routing", "bogus"}, 2, `--routing "bogus": want router or predictor`, []string{"topk"}},
		{"run --routing topk", []string{"-m", missing, "-p", "x", "--routing", "topk"}, 2, `--routing "topk": want router or predictor`, nil},
		{"run --temp Inf", []string{"-m", missing, "-p", "x", "--temp", "Inf"}, 2, `"Inf" is not a finite number`, nil},
		{"run --temp NaN", []string{"-m", missing, "-p", "x", "--temp", "NaN"}, 2, `"NaN" is not a finite number`, nil},
		{"run --top-p 1e39", []string{"-m", missing, "-p", "x", "--top-p", "1e39"}, 2, `"1e39" is not a finite number`, nil},
		{"run unknown flag", []string{"-m", missing, "--bogus"}, 2, "modrun run: usage: flag provided but not defined: --bogus (modrun run -h lists the flags)", []string{"-ubatch"}},
		{"run --seed below -1", []string{"-m", missing, "-p", "x", "--seed", "-5"}, 2, "--seed -5: want 0 or more, or -1 for one from the clock", nil},
		{"run bad -n", []string{"-m", missing, "-n", "lots"}, 2, `invalid value "lots" for flag -n`, nil},
		{"run prompt not UTF-8", []string{"-m", missing, "-p", "caf\xe9"}, 2, "-p: the prompt is not valid UTF-8", nil},
		{"run --routing-map unwritable", []string{"-m", modTrained, "-p", "x", "--routing-map", filepath.Join(noDir, "map.png")}, 1, "--routing-map " + filepath.Join(noDir, "map.png") + ": directory " + noDir + " does not exist", nil},
		{"run --routing-map a directory", []string{"-m", modTrained, "-p", "x", "--routing-map", dir}, 1, "--routing-map " + dir + ": is a directory, not a file", nil},
		{"run without -m", []string{"-p", "x"}, 2, "-m FILE.gguf is required", nil},
		{"run -m missing", []string{"-m", missing, "-p", "x"}, 1, "-m " + missing + ": no such file or directory", nil},
		{"run -m a directory", []string{"-m", dir, "-p", "x"}, 1, "-m " + dir + ": is a directory, not a file", nil},
		{"run -m empty", []string{"-m", empty, "-p", "x"}, 1, "empty.gguf: 0 bytes is too short for a GGUF header", nil},

		// perplexity
		{"perplexity --routing lists all three", []string{"perplexity", "-m", missing, "-f", text, "--routing", "bogus"}, 2, `--routing "bogus": want topk, router or predictor`, nil},
		{"perplexity --ctx negative", []string{"perplexity", "-m", missing, "-f", text, "--ctx", "-3"}, 2, "--ctx -3: must be at least 2 (BOS and one token to score), or 0: the model's", nil},
		{"perplexity --capacity out of range", []string{"perplexity", "-m", missing, "-f", text, "--capacity", "1.5"}, 2, "--capacity 1.5: want a fraction in (0, 1]", nil},
		{"perplexity --capacity with router", []string{"perplexity", "-m", missing, "-f", text, "--capacity", "0.5", "--routing", "router"}, 2, "--capacity sets the fraction of --routing topk", nil},
		{"perplexity --capacity on a dense model", []string{"perplexity", "-m", model, "-f", text, "--capacity", "0.5"}, 1, "--capacity 0.5: " + model + " is a dense model", []string{"--routing"}},
		{"perplexity --device on the cpu", []string{"perplexity", "-m", missing, "-f", text, "--backend", "cpu", "--device", "0"}, 2, "--device 0 picks a Vulkan device", nil},
		{"perplexity -f missing", []string{"perplexity", "-m", model, "-f", filepath.Join(dir, "none.txt")}, 1, "-f " + filepath.Join(dir, "none.txt") + ": no such file or directory", nil},
		{"perplexity -f a directory", []string{"perplexity", "-m", model, "-f", dir}, 1, "-f " + dir + ": is a directory, not a file", nil},
		{"perplexity -f empty", []string{"perplexity", "-m", model, "-f", empty}, 1, "the file has no text to score", nil},
		{"perplexity without -m", []string{"perplexity", "-f", text}, 2, "-m FILE.gguf is required", nil},
		{"perplexity --kv-type unknown", []string{"perplexity", "-m", missing, "-f", text, "--kv-type", "q8"}, 2, `--kv-type "q8" is not f16 or f32`, nil},
		{"perplexity --kv-type on the reference", []string{"perplexity", "-m", missing, "-f", text, "--backend", "reference", "--kv-type", "f16"}, 2,
			"--kv-type sets the vulkan and cpu backends' KV cache; the reference's is float32", nil},

		// bench: nothing is built before its flags are checked
		{"bench --kv-type", []string{"bench", "--synthetic", "stories260k", "--backends", "cpu", "--kv-type", "q4"}, 2, `--kv-type "q4" is not f16 or f32`, built},
		{"bench --top-p without --temp", []string{"bench", "--synthetic", "stories260k", "--backends", "cpu", "--top-p", "0.9"}, 2, "--top-p needs --temp above 0", built},
		{"bench --temp negative", []string{"bench", "--synthetic", "stories260k", "--backends", "cpu", "--temp", "-1"}, 2, "--temp -1: must be 0 (greedy) or positive", built},
		{"bench --top-p out of range", []string{"bench", "--synthetic", "stories260k", "--backends", "cpu", "--temp", "1", "--top-p", "2"}, 2, "--top-p 2: must be in (0, 1]", built},
		{"bench --ubatch 0", []string{"bench", "--synthetic", "stories260k", "--backends", "cpu", "--ubatch", "0"}, 2, "--ubatch 0: must be at least 1", built},
		{"bench --ctx negative", []string{"bench", "--synthetic", "stories260k", "--backends", "cpu", "--ctx", "-2"}, 2, "--ctx -2: must be positive", built},
		{"bench --out unwritable", []string{"bench", "--synthetic", "stories260k", "--backends", "cpu", "--out", filepath.Join(noDir, "b.md")}, 1, "--out " + filepath.Join(noDir, "b.md") + ": directory " + noDir + " does not exist", built},
		{"bench --json-out a directory", []string{"bench", "--synthetic", "stories260k", "--backends", "cpu", "--json-out", dir}, 1, "--json-out " + dir + ": is a directory, not a file", built},
		{"bench --save unwritable", []string{"bench", "--synthetic", "stories260k", "--backends", "cpu", "--save", filepath.Join(noDir, "s.gguf")}, 1, "--save " + filepath.Join(noDir, "s.gguf"), built},
		{"bench --capacity 0", []string{"bench", "--synthetic", "stories260k", "--capacity", "0"}, 2, "--capacity 0: want a fraction in (0, 1]", built},
		{"bench --capacity 1.5", []string{"bench", "--synthetic", "stories260k", "--capacity", "1.5"}, 2, "--capacity 1.5: want a fraction in (0, 1]", built},
		{"bench --device on the cpu", []string{"bench", "--synthetic", "stories260k", "--backends", "cpu", "--device", "1"}, 2, "--device 1 picks a Vulkan device, but the backend is cpu", built},
		{"bench --device negative", []string{"bench", "--synthetic", "stories260k", "--device", "-2"}, 2, "--device -2: want a device index", built},
		{"bench --device on cpu and reference", []string{"bench", "--synthetic", "stories260k", "--backends", "cpu,reference", "--device", "0"}, 2, "--device 0 picks a Vulkan device, but the backend is cpu,reference: drop --device, or use --backend vulkan", built},
		{"bench --backends unknown", []string{"bench", "--synthetic", "stories260k", "--backends", "cpu,gpu"}, 2, `--backends: "gpu" is not cpu, reference or vulkan`, built},
		{"bench --ubatch 0 on vulkan", []string{"bench", "--synthetic", "stories260k", "--backends", "vulkan", "--ubatch", "0"}, 2, "--ubatch 0: must be at least 1", built},
		{"bench bad shape after a file", []string{"bench", "-m", model, "--synthetic", "gpt5"}, 2, `synthetic shape "gpt5"`, built},
		{"bench --prompt and -n past the context", []string{"bench", "--synthetic", "stories260k", "--prompt", "500", "-n", "20"}, 2, "--prompt 500 + -n 20 = 520 tokens pass the context length 512 of stories260k", built},
		{"bench --ctx past the shape's", []string{"bench", "--synthetic", "stories260k", "--ctx", "600"}, 2, "--ctx 600: must be in [1, 512] (the context length of stories260k)", built},
		{"bench --repeats 0", []string{"bench", "--synthetic", "stories260k", "--repeats", "0"}, 2, "--repeats 0: must be positive", built},
		{"bench -m missing", []string{"bench", "-m", missing, "--synthetic", "stories260k"}, 1, "-m " + missing + ": no such file or directory", built},

		// tokenize
		{"tokenize without -m", []string{"tokenize"}, 2, "-m FILE.gguf is required", nil},
		{"tokenize -m a directory", []string{"tokenize", "-m", dir}, 1, "-m " + dir + ": is a directory, not a file", nil},
		{"tokenize -m empty", []string{"tokenize", "-m", empty}, 1, "-m " + empty + ": gguf: " + empty + ": 0 bytes", nil},
		{"tokenize --out unwritable", []string{"tokenize", "-m", model, "--out", filepath.Join(noDir, "ids.bin")}, 1, "--out " + filepath.Join(noDir, "ids.bin") + ": directory", nil},

		// inspect, devices
		{"inspect a directory", []string{"inspect", dir}, 1, dir, nil},
		{"inspect empty", []string{"inspect", empty}, 1, "0 bytes is too short for a GGUF header", nil},
		{"inspect --full without --json", []string{"inspect", "--full", missing}, 2, "--full needs --json", []string{missing}},
		{"inspect unknown flag", []string{"inspect", "--bogus", model}, 2, "modrun inspect: usage: flag provided but not defined: --bogus", []string{"-json"}},
		{"devices argument", []string{"devices", "all"}, 2, "devices takes no arguments", nil},
		{"unknown command", []string{"srve"}, 2, `modrun: unknown command "srve"`, nil},
	})
}

// TestDecodeNamesTheBadID: tokenize --decode says which word of stdin is no
// token id, in words, not strconv's.
func TestDecodeNamesTheBadID(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	for _, c := range []struct{ in, want string }{
		{"1 abc 2", `stdin: word 2, "abc", is not a token id: want a whole number in [0, 512)`},
		{"99999999999", `stdin: word 1, "99999999999", is not a token id`},
		{"512", `stdin: word 1, "512", is not a token id`},
		{"-1", `stdin: word 1, "-1", is not a token id`},
		{"3.5", `stdin: word 1, "3.5", is not a token id`},
	} {
		var out, errOut strings.Builder
		code := run([]string{"tokenize", "-m", model, "--decode"}, strings.NewReader(c.in), &out, &errOut)
		assert.Equal(t, 1, code, c.in)
		assert.Contains(t, errOut.String(), c.want)
		assert.NotContains(t, errOut.String(), "strconv")
	}
}

// TestConvertNamesTheInput: convert checks its paths before reading any,
// naming the flag and the file.
func TestConvertNamesTheInput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.gguf")
	missing := filepath.Join(dir, "missing.pt")
	full, err := os.ReadFile(cv("tiny-mod.pt"))
	require.NoError(t, err)
	truncated := filepath.Join(dir, "truncated.pt")
	require.NoError(t, os.WriteFile(truncated, full[:3000], 0o644))
	vocab, cfg := cv("vocab512.gguf"), cv("tiny-mod.config.json")
	config, err := os.ReadFile(cfg)
	require.NoError(t, err)
	besideCkpt, besideCfg := filepath.Join(dir, "ckpt.pt"), filepath.Join(dir, "config.json")
	require.NoError(t, os.WriteFile(besideCkpt, full, 0o644))
	require.NoError(t, os.WriteFile(besideCfg, config, 0o644))
	defer func() {
		after, err := os.ReadFile(besideCfg)
		require.NoError(t, err)
		assert.Equal(t, config, after, "the config is untouched")
	}()
	runCLICases(t, []cliCase{
		{"-i missing", []string{"convert", "-i", missing, "--vocab", vocab, "-o", out}, 1, "-i " + missing + ": no such file or directory", []string{"config.json"}},
		{"-i a directory", []string{"convert", "-i", dir, "-c", cfg, "--vocab", vocab, "-o", out}, 1, "-i " + dir + ": is a directory, not a file", nil},
		{"-c missing", []string{"convert", "-i", cv("tiny-mod.pt"), "-c", filepath.Join(dir, "c.json"), "--vocab", vocab, "-o", out}, 1, "-c " + filepath.Join(dir, "c.json") + ": no such file", nil},
		{"--vocab missing", []string{"convert", "-i", cv("tiny-mod.pt"), "-c", cfg, "--vocab", filepath.Join(dir, "v.gguf"), "-o", out}, 1, "--vocab " + filepath.Join(dir, "v.gguf") + ": no such file", nil},
		{"-o unwritable", []string{"convert", "-i", cv("tiny-mod.pt"), "-c", cfg, "--vocab", vocab, "-o", filepath.Join(dir, "no", "out.gguf")}, 1, "-o " + filepath.Join(dir, "no", "out.gguf") + ": directory", nil},
		{"-o is -c", []string{"convert", "-i", cv("tiny-mod.pt"), "-c", cfg, "--vocab", vocab, "-o", cfg}, 2, "-o " + cfg + " would overwrite an input", nil},
		{"-o is the config beside -i", []string{"convert", "-i", besideCkpt, "--vocab", vocab, "-o", besideCfg}, 2, "-o " + besideCfg + " would overwrite an input (the config beside -i)", nil},
		{"-c not JSON", []string{"convert", "-i", cv("tiny-mod.pt"), "-c", cv("tiny-mod.pt"), "--vocab", vocab, "-o", out}, 1, "config " + cv("tiny-mod.pt") + ": not JSON at byte 1", nil},
		{"truncated checkpoint", []string{"convert", "-i", truncated, "-c", cfg, "--vocab", vocab, "-o", out}, 1, "checkpoint " + truncated + ": a zip archive (torch.save's format) that does not open, truncated or damaged", []string{"persistent ID"}},
	})
}

// TestContextZeroIsTheModels: --ctx 0 is the model's context length, and the
// flag's help says so.
// TestPromptPastTheContext: a prompt longer than the context length is a
// usage error that names both flags deciding it, before any token runs.
func TestPromptPastTheContext(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	long := strings.Repeat("Once upon a time ", 10)
	runCLICases(t, []cliCase{
		{"run", []string{"-m", model, "-p", long, "--ctx", "8", "--backend", "cpu"}, 2,
			"more than the context length 8: shorten -p, or raise --ctx", nil},
		{"run --backend reference", []string{"-m", model, "-p", long, "-c", "40", "--backend", "reference"}, 2,
			"more than the context length 40: shorten -p, or raise --ctx", nil},
	})
}

// TestDeviceEnvIsNotIgnored: MODRUN_DEVICE names a device as --device does,
// so with --backend auto a device that does not exist is an error naming
// the variable, not a quiet fallback to the CPU.
func TestDeviceEnvIsNotIgnored(t *testing.T) {
	needVulkan(t)
	model := shared.Path(t, "models/stories260K.gguf")
	text := filepath.Join(t.TempDir(), "story.txt")
	require.NoError(t, os.WriteFile(text, []byte("Once upon a time."), 0o644))
	t.Setenv(vk.EnvDevice, "99")
	runCLICases(t, []cliCase{
		{"run", []string{"-m", model, "-p", "x", "-n", "1"}, 1, "MODRUN_DEVICE 99: no such device", []string{"running on the CPU"}},
		{"perplexity", []string{"perplexity", "-m", model, "-f", text}, 1, "MODRUN_DEVICE 99: no such device", []string{"running on the CPU"}},
	})
}

func TestContextZeroIsTheModels(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	code, _, stderr := modrun(t, "-m", model, "-p", "x", "-n", "2", "--ctx", "0", "--backend", "cpu")
	require.Equal(t, 0, code, stderr)
	_, help, _ := modrun(t, "run", "-h")
	assert.Contains(t, help, "0 = the model's")
	_, help, _ = modrun(t, "perplexity", "-h")
	assert.Contains(t, help, "0 = the model's context length")
}

// TestConvertChecksVocabFirst: a --vocab without a tokenizer is refused
// before the checkpoint is read (here a truncated one, whose error would
// come first otherwise).
func TestConvertChecksVocabFirst(t *testing.T) {
	dir := t.TempDir()
	full, err := os.ReadFile(cv("tiny-mod.pt"))
	require.NoError(t, err)
	truncated := filepath.Join(dir, "truncated.pt")
	require.NoError(t, os.WriteFile(truncated, full[:3000], 0o644))
	w := gguf.NewWriter()
	require.NoError(t, w.SetKV("general.architecture", gguf.Scalar("llama")))
	noTokenizer := filepath.Join(dir, "no-tokenizer.gguf")
	require.NoError(t, w.WriteFile(noTokenizer))
	code, out, stderr := modrun(t, "convert", "-i", truncated, "-c", cv("tiny-mod.config.json"), "--vocab", noTokenizer, "-o", filepath.Join(dir, "out.gguf"))
	assert.Equal(t, 1, code)
	assert.Empty(t, out)
	assert.True(t, strings.HasPrefix(stderr, "modrun convert: --vocab "+noTokenizer+": "), stderr)
	assert.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
}

// TestErrorsAreOneLine: a usage error is one line, never the flag list
// before it (-h prints that), and inspect takes -m as every command does.
func TestErrorsAreOneLine(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect"}, "modrun inspect: usage: want one GGUF file (FILE.gguf or -m FILE.gguf), got 0 arguments\n"},
		{[]string{"inspect", "-m", model, model}, "modrun inspect: usage: -m " + model + " and the argument \"" + model + "\" both name the file: give one\n"},
		{[]string{"devices", "extra"}, "modrun devices: usage: devices takes no arguments, got 1\n"},
		{[]string{"convert", "-i", "x.pt"}, "modrun convert: usage: -i, --vocab and -o are required (modrun convert -h lists the flags)\n"},
		{[]string{"frobnicate"}, "modrun: unknown command \"frobnicate\" (modrun -h lists the commands)\n"},
		{[]string{"run", "--frobnicate"}, "modrun run: usage: flag provided but not defined: --frobnicate (modrun run -h lists the flags)\n"},
	} {
		code, out, stderr := modrun(t, c.args...)
		assert.Equal(t, 2, code, "%q", c.args)
		assert.Empty(t, out)
		assert.Equal(t, c.want, stderr, "%q", c.args)
	}
	code, viaFlag, stderr := modrun(t, "inspect", "-m", model)
	require.Equal(t, 0, code, stderr)
	_, viaArg, _ := modrun(t, "inspect", model)
	assert.Equal(t, viaArg, viaFlag)
}
