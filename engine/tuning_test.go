package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/mod"
)

// TestBackendTakesTuning: with BackendOptions.Knobs nil, a Vulkan runner
// (generation and scoring, eval mode too) takes the knobs the tuning file
// holds for its model and device, and the Backend says so; explicit
// Knobs, another model and MODRUN_TUNING=off leave the file aside; a bad
// file stops the open by name.
func TestBackendTakesTuning(t *testing.T) {
	m, err := mod.Open(benchModel)
	require.NoError(t, err)
	defer m.Close()
	path := filepath.Join(t.TempDir(), "tuning.json")
	t.Setenv("MODRUN_TUNING", path)

	b, _, err := OpenBackend(m, mod.RoutingRouter, BackendOptions{Name: BackendVulkan})
	require.NoError(t, err)
	info := b.Runner.(gpuRunner).DeviceInfo()
	assert.Nil(t, b.Tuned, "no file: no tuning")
	b.Close()

	knobs := vulkan.Knobs{"MODRUN_PROMPT_STEPS": "1", "MODRUN_VEC_ROWS": "2"}
	tu := &vulkan.Tuning{Version: vulkan.TuningVersion}
	tu.Put(vulkan.TuningEntry{TuningKey: vulkan.KeyOf(info, m), Knobs: knobs})
	dense, err := mod.Open("../testdata/mod/dense-rand.gguf")
	require.NoError(t, err)
	defer dense.Close()
	require.NoError(t, tu.Save(path))

	b, _, err = OpenBackend(m, mod.RoutingRouter, BackendOptions{Name: BackendVulkan})
	require.NoError(t, err)
	assert.Equal(t, knobs, b.Tuned)
	assert.Equal(t, path, b.TuningFile)
	assert.Equal(t, knobs, b.Runner.(gpuRunner).Knobs(), "the runner took them")
	b.Close()

	sc, _, err := OpenScorer(m, mod.RoutingRouter, BackendOptions{Name: BackendVulkan})
	require.NoError(t, err)
	assert.Equal(t, knobs, sc.Scorer.(*vulkan.Runner).Knobs(), "a scoring runner too")
	sc.Close()

	b, _, err = OpenBackend(m, mod.RoutingRouter, BackendOptions{Name: BackendVulkan, Knobs: vulkan.Knobs{}})
	require.NoError(t, err)
	assert.Nil(t, b.Tuned, "explicit knobs: the file is not read")
	assert.Empty(t, b.Runner.(gpuRunner).Knobs())
	b.Close()

	b, _, err = OpenBackend(dense, mod.RoutingRouter, BackendOptions{Name: BackendVulkan})
	require.NoError(t, err)
	assert.Nil(t, b.Tuned, "another model's entry does not apply")
	b.Close()

	t.Setenv("MODRUN_TUNING", "off")
	b, _, err = OpenBackend(m, mod.RoutingRouter, BackendOptions{Name: BackendVulkan})
	require.NoError(t, err)
	assert.Nil(t, b.Tuned, "MODRUN_TUNING=off")
	b.Close()

	require.NoError(t, os.WriteFile(path, []byte("{"), 0o644))
	t.Setenv("MODRUN_TUNING", path)
	_, _, err = OpenBackend(m, mod.RoutingRouter, BackendOptions{Name: BackendVulkan})
	assert.ErrorContains(t, err, "tuning file "+path)
	_, _, err = OpenScorer(m, mod.RoutingTopK, BackendOptions{Name: BackendVulkan})
	assert.ErrorContains(t, err, "tuning file "+path, "eval mode reads it too")
}
