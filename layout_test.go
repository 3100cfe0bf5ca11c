package modrun

import (
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/modrun/modrun"

// layers says which of our packages each package may depend on, directly or
// not (DESIGN.md §2: cmd -> bench -> engine -> engine/vulkan -> (mod, vk,
// shaders), engine -> engine/cpu -> mod; mod -> (gguf, tokenizer); vk and
// shaders import nothing of ours).
// A key ending in "/..." covers the folder and everything below it; "*"
// allows every package but cmd and bench, which nothing may import but
// cmd, whose bench command runs bench's measurements.
var layers = map[string][]string{
	"gguf":                   {"internal/..."},
	"vk":                     {"internal/..."},
	"vk/vktest":              {"vk", "internal/..."}, // the tests' device helper
	"shaders":                {"internal/..."},
	"internal/...":           {"internal/..."},
	"tokenizer":              {"gguf", "internal/..."},
	"mod":                    {"gguf", "tokenizer", "internal/..."},
	"mod/quant":              {"mod", "gguf", "internal/..."},                                               // each weight matrix's type (llama.cpp's mixes)
	"mod/convert":            {"mod", "mod/quant", "gguf", "tokenizer", "internal/..."},                     // checkpoints -> GGUF
	"mod/synth":              {"mod", "mod/quant", "gguf", "tokenizer", "internal/..."},                     // random-weight models of standard shapes
	"engine/vulkan":          {"engine/sched", "mod", "vk", "shaders", "gguf", "tokenizer", "internal/..."}, // Stepper runs sched's steps, as engine/cpu does
	"engine/sched":           {"mod", "gguf", "tokenizer", "internal/..."},                                  // many sequences per step: pages, tables, scheduler
	"engine/sched/schedtest": {"engine/sched", "mod", "gguf", "tokenizer", "internal/..."},                  // the step runners' equality tests' driver
	"engine/grammar":         {"tokenizer", "gguf", "internal/..."},                                         // grammars, JSON schemas, token masks
	"engine/cpu":             {"engine/sched", "mod", "gguf", "tokenizer", "internal/..."},                  // the fast CPU runner
	"engine":                 {"engine/grammar", "engine/vulkan", "engine/cpu", "engine/sched", "mod", "vk", "shaders", "gguf", "tokenizer", "internal/..."},
	"":                       {"*"}, // the root package: the Go API for embedding
	// The HTTP server: through the root API (TestServerImportsTheAPI
	// checks its direct imports), so transitively what the API uses.
	"server":      {"", "engine", "engine/...", "mod", "mod/...", "vk", "shaders", "gguf", "tokenizer", "internal/..."},
	"server/fuzz": {"server", "", "engine", "engine/...", "mod", "mod/...", "vk", "shaders", "gguf", "tokenizer", "internal/..."}, // the server's fuzz target
	"cmd/...":     {"*"},
	"bench/...":   {"*"},
	"train/...":   {"*"},

	// The tests' reader of the API's routing map (the API draws maps; only
	// tests read them back).
	"internal/maptest": {"*"},

	// The tests' GGUF copies with a NaN or an Inf planted.
	"internal/poison": {"gguf", "internal/..."},

	// The synthetic model engine's and bench's tests share.
	"internal/synthtest": {"mod/synth", "mod/quant", "mod", "gguf", "tokenizer", "internal/..."},

	// The tests' conversion of the public MoD fixtures (both backends').
	"internal/publictest": {"mod/convert", "mod/quant", "mod", "gguf", "tokenizer", "internal/..."},
}

func TestImportDirection(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "./...")
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", exitStderr(err))
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		deps[fields[0]] = fields[1:]
	}
	require.Contains(t, deps, module+"/gguf", "go list saw the packages")
	assert.Empty(t, checkLayers(deps))
}

// TestCheckLayersCatchesViolations shows that the check above can fail.
func TestCheckLayersCatchesViolations(t *testing.T) {
	deps := map[string][]string{
		module + "/mod":        {module + "/gguf", module + "/vk", "fmt"},
		module + "/gguf":       {"fmt"},
		module + "/engine":     {module + "/cmd/modrun"},
		module + "/newthing":   {},
		module + "/cmd/modrun": {module + "/engine", module + "/mod", module + "/bench"},
		module + "/server":     {module + "/bench"},
	}
	assert.Equal(t, []string{
		"engine imports cmd/modrun, which nothing may import",
		"mod imports vk, which DESIGN.md §2 does not allow (allowed: gguf, tokenizer, internal/...)",
		"newthing has no place in the layers of DESIGN.md §2: add it to layers in layout_test.go",
		"server imports bench, which nothing may import",
	}, checkLayers(deps))
}

// TestServerImportsTheAPI: server/ uses the root API and nothing below it
// (DESIGN.md §2), so that the engine's changes (batching) do not reach it.
func TestServerImportsTheAPI(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, "./server").Output()
	require.NoError(t, err, "go list: %s", exitStderr(err))
	for _, imp := range strings.Fields(string(out)) {
		if rel, ours := relative(imp); ours {
			assert.True(t, rel == "" || matches("internal/...", rel), "server imports %s: only the root API (and internal/) may be", imp)
		}
	}
}

// checkLayers returns one line for each dependency that breaks layers.
func checkLayers(deps map[string][]string) []string {
	var bad []string
	for pkg, ds := range deps {
		rel, ok := relative(pkg)
		if !ok {
			continue
		}
		allowed, ok := layerOf(rel)
		if !ok {
			bad = append(bad, rel+" has no place in the layers of DESIGN.md §2: add it to layers in layout_test.go")
			continue
		}
		for _, d := range ds {
			drel, ok := relative(d)
			if !ok {
				continue
			}
			switch {
			case matches("cmd/...", drel) || matches("bench/...", drel) && !matches("cmd/...", rel):
				bad = append(bad, rel+" imports "+drel+", which nothing may import")
			case !allows(allowed, drel):
				bad = append(bad, rel+" imports "+drel+", which DESIGN.md §2 does not allow (allowed: "+strings.Join(allowed, ", ")+")")
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// relative strips the module path; ok is false for packages not ours.
func relative(pkg string) (string, bool) {
	if pkg == module {
		return "", true
	}
	rel, ok := strings.CutPrefix(pkg, module+"/")
	return rel, ok
}

// layerOf finds the entry of layers for a package: its exact name, else the
// longest "/..." pattern that covers it.
func layerOf(rel string) ([]string, bool) {
	if allowed, ok := layers[rel]; ok {
		return allowed, true
	}
	best := ""
	for pattern := range layers {
		if strings.HasSuffix(pattern, "/...") && matches(pattern, rel) && len(pattern) > len(best) {
			best = pattern
		}
	}
	allowed, ok := layers[best]
	return allowed, ok && best != ""
}

func allows(allowed []string, rel string) bool {
	for _, a := range allowed {
		if a == "*" || a == rel || matches(a, rel) {
			return true
		}
	}
	return false
}

func matches(pattern, rel string) bool {
	prefix, ok := strings.CutSuffix(pattern, "/...")
	return ok && (rel == prefix || strings.HasPrefix(rel, prefix+"/"))
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
