package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
)

// tuneModel is small enough for a tuning run on lavapipe in seconds.
const tuneModel = "../../models/stories260K.gguf"

// tuneArgsFor are a quick tuning run's flags.
func tuneArgsFor(extra ...string) []string {
	return append([]string{"tune", "-m", tuneModel, "--prompt", "16", "--short", "3", "-n", "4", "--rounds", "1", "--validate", "2"}, extra...)
}

// TestTune: tune tries every knob in order and says which have no effect
// on the device (on lavapipe: the tensor-core ones, having no cooperative
// matrices, and the GPU profile's matvec and decode attention kernels).
// It times the others against the base round by round and writes an
// entry keyed by the device, driver, kernels and model, which a later run
// of the model takes (run --stats names it); a second run replaces the
// entry; --dry-run writes nothing; --json is the entry.
func TestTune(t *testing.T) {
	needVulkan(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "tuning.json")
	code, stdout, stderr := modrun(t, tuneArgsFor("--file", file)...)
	require.Equal(t, 0, code, stderr)
	for _, knob := range tunedKnobs() { // each knob is tried
		assert.Regexp(t, regexp.MustCompile(`(?m)^\| `+knob+` \| `), stdout)
	}
	for _, knob := range untunedKnobs { // but the precision's
		assert.NotRegexp(t, regexp.MustCompile(`(?m)^\| `+knob+` \| `), stdout)
	}
	lavapipe := strings.Contains(stderr, "llvmpipe")
	if lavapipe {
		for _, knob := range []string{"MODRUN_TENSOR_CORES", "MODRUN_MATMUL_PIPE", "MODRUN_MATMUL_DIRECT", "MODRUN_ATTENTION_COOP", "MODRUN_MATVEC_ROWS", "MODRUN_ATTEND_KEYS"} {
			assert.Regexp(t, `\| `+knob+` \| [^|]+ \| [^|]+ \| (prefill|decode) \| 16 \|  \|  \|  \|  \| no \| no effect on this device \|`, stdout)
		}
		// A CPU device's batched steps never run paged_attend_own.
		assert.Regexp(t, `\| MODRUN_ATTEND_OWN \| 0 \| [^|]+ \| parallel, 8 sequences \| 32 \|  \|  \|  \|  \| no \| no effect on this device \|`, stdout)
	}
	// The timed trials report both rows' rates and a decision.
	// The short prompt's trial tries the other of the runner's choice: on
	// lavapipe, whose prefill runs a 3-token chunk as matvecs, 8 steps.
	assert.Regexp(t, `\| MODRUN_PROMPT_STEPS \| (1|8) \| [^|]+ \| prefill \| 3 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| (yes|no) \| prefill [0-9.]+x, faster in [0-3] of 1 rounds; decode [0-9.]+x: `, stdout)
	// The parallel trial: half lavapipe's 8 vector rows, at 8 sequences.
	if lavapipe {
		assert.Regexp(t, `\| MODRUN_VEC_ROWS \| 4 \| [^|]+ \| parallel, 8 sequences \| 32 \|  \|  \| [0-9.]+ \| [0-9.]+ \| (yes|no) \| parallel [0-9.]+x, faster in [01] of 1 rounds`, stdout)
	}
	assert.Contains(t, stdout, "written to "+file)

	tu, err := vulkan.LoadTuning(file)
	require.NoError(t, err)
	require.Len(t, tu.Entries, 1)
	e := tu.Entries[0]
	assert.Len(t, e.Trials, len(tunedKnobs()))
	assert.Contains(t, e.Model, "embd 64 ff 172 layers 5")
	for _, tr := range e.Trials {
		if tr.Chosen {
			assert.Equal(t, tr.Value, e.Knobs[tr.Knob], "a knob taken is kept")
		}
	}

	// A run of the model on the device takes the entry.
	t.Setenv("MODRUN_TUNING", file)
	code, _, stderr = modrun(t, "-m", tuneModel, "--backend", "vulkan", "-p", "Once", "-n", "2", "--stats")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "tuning: "+e.Knobs.Describe()+" ("+file+") (modrun tune)")
	// bench says which rows ran with tuned knobs, one stream's and --parallel's.
	note := "ran with the tuning file's knobs: " + e.Knobs.Describe() + " (" + file + ")"
	code, stdout, stderr = modrun(t, "bench", "-m", tuneModel, "--backends", "vulkan", "--prompt", "16", "-n", "4", "--repeats", "1", "--validate", "0")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "- "+tuneModel+" (dense) on vulkan "+note)
	code, stdout, stderr = modrun(t, "bench", "-m", tuneModel, "--backends", "vulkan", "--prompt", "16", "-n", "4", "--repeats", "1", "--parallel", "2")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "- "+tuneModel+" (dense) on vulkan at --parallel 2 "+note)

	code, _, stderr = modrun(t, tuneArgsFor()...) // MODRUN_TUNING names the file
	require.Equal(t, 0, code, stderr)
	tu, err = vulkan.LoadTuning(file)
	require.NoError(t, err)
	assert.Len(t, tu.Entries, 1, "the same key: replaced")

	dry := filepath.Join(dir, "dry.json")
	code, stdout, stderr = modrun(t, tuneArgsFor("--file", dry, "--dry-run", "--json")...)
	require.Equal(t, 0, code, stderr)
	_, err = os.Stat(dry)
	assert.True(t, os.IsNotExist(err), "--dry-run writes nothing")
	var je vulkan.TuningEntry
	require.NoError(t, json.Unmarshal([]byte(stdout), &je))
	assert.Equal(t, e.TuningKey, je.TuningKey)
	assert.Len(t, je.Trials, len(tunedKnobs()))
}

// TestTuneRefusesAFailingCandidate: a candidate whose runner fails its
// validation against the CPU is reported as failed and never kept, and
// the run goes on to the next knob.
func TestTuneRefusesAFailingCandidate(t *testing.T) {
	needVulkan(t)
	plantTuneError = func(k vulkan.Knobs, r engine.Runner) engine.Runner {
		if k["MODRUN_PROMPT_STEPS"] != "" || k["MODRUN_HANDOFF"] != "" {
			return &stale{Runner: r}
		}
		return r
	}
	defer func() { plantTuneError = nil }()
	file := filepath.Join(t.TempDir(), "tuning.json")
	code, stdout, stderr := modrun(t, tuneArgsFor("--file", file, "--margin", "0")...)
	require.Equal(t, 0, code, stderr)
	for _, knob := range []string{"MODRUN_HANDOFF", "MODRUN_PROMPT_STEPS"} {
		assert.Regexp(t, `\| `+knob+` \| [0-9]+ \| [^|]+ \| [a-z]+ \| [0-9]+ \|  \|  \|  \|  \| no \| failed: [^|]*validation failed`, stdout)
	}
	tu, err := vulkan.LoadTuning(file)
	require.NoError(t, err)
	require.Len(t, tu.Entries, 1)
	assert.NotContains(t, tu.Entries[0].Knobs, "MODRUN_HANDOFF")
	assert.NotContains(t, tu.Entries[0].Knobs, "MODRUN_PROMPT_STEPS")
}

// TestTuneKeepsTakenRows: a candidate taken becomes the base, and its
// row (open, validated, warm) times the next trial at the same prompt.
func TestTuneKeepsTakenRows(t *testing.T) {
	needVulkan(t)
	trials, decide := tuneTrials, decideTrial
	defer func() { tuneTrials, decideTrial = trials, decide }()
	tuneTrials = []tuneTrial{
		{knob: "MODRUN_PROMPT_STEPS", value: "2", metric: "prefill"},
		{knob: "MODRUN_HANDOFF", metric: "decode"},
		{knob: "MODRUN_PROMPT_STEPS", value: "3", metric: "prefill"},
	}
	decideTrial = func(vulkan.TuningTrial, float64) (bool, string) { return true, "taken (test)" }
	code, stdout, stderr := modrun(t, tuneArgsFor("--dry-run")...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "| MODRUN_HANDOFF | 1 | MODRUN_PROMPT_STEPS=2 | decode |")
	assert.Contains(t, stdout, "| MODRUN_PROMPT_STEPS | 3 | MODRUN_HANDOFF=1 MODRUN_PROMPT_STEPS=2 | prefill |")
	assert.Contains(t, stdout, "kept: MODRUN_HANDOFF=1 MODRUN_PROMPT_STEPS=3")
}

// TestTuneDecide: a knob is taken when its metric gains the margin and
// its other rate does not fall by more than twice the margin.
func TestTuneDecide(t *testing.T) {
	for _, tc := range []struct {
		metric       string
		rounds, wins int
		gain, other  float64
		chosen       bool
		why          string
	}{
		{"prefill", 5, 5, 1.10, 1.00, true, "prefill 1.100x, faster in 5 of 5 rounds; decode 1.000x: taken"},
		{"prefill", 5, 4, 1.10, 0.95, true, "prefill 1.100x, faster in 4 of 5 rounds; decode 0.950x: taken"},
		{"prefill", 5, 3, 1.10, 1.00, false, "prefill 1.100x, faster in 3 of 5 rounds; decode 1.000x: fewer than 4 rounds"},
		{"prefill", 5, 5, 1.02, 1.20, false, "prefill 1.020x, faster in 5 of 5 rounds; decode 1.200x: under the 3% margin"},
		{"prefill", 5, 5, 1.20, 0.92, false, "prefill 1.200x, faster in 5 of 5 rounds; decode 0.920x: decode worse by more than 6%"},
		{"decode", 3, 3, 1.05, 0.90, false, "decode 1.050x, faster in 3 of 3 rounds; prefill 0.900x: prefill worse by more than 6%"},
		{"decode", 3, 2, 1.05, 1.00, false, "decode 1.050x, faster in 2 of 3 rounds; prefill 1.000x: fewer than 3 rounds"},
		{"parallel", 5, 4, 1.056, 1, true, "parallel 1.056x, faster in 4 of 5 rounds: taken"},
		{"parallel", 5, 5, 1.011, 1, false, "parallel 1.011x, faster in 5 of 5 rounds: under the 3% margin"},
		{"prefill", 0, 0, 0, 0, false, "no rounds timed"},
	} {
		tr := vulkan.TuningTrial{Metric: tc.metric, Rounds: tc.rounds, Wins: tc.wins, Gain: tc.gain, Other: tc.other}
		chosen, why := tuneDecide(tr, 0.03)
		assert.Equal(t, tc.chosen, chosen, "%+v", tc)
		assert.Equal(t, tc.why, why, "%+v", tc)
	}
	for _, tc := range []struct {
		base, cand   []float64
		rounds, wins int
		gain         float64
	}{
		{[]float64{100, 100, 100}, []float64{110, 90, 120}, 3, 2, 1.1},
		{[]float64{100, 50, 0}, []float64{100, 100, 100}, 2, 1, 2}, // a base without a rate is left out
		{nil, []float64{1}, 0, 0, 0},
	} {
		rounds, wins, gain := paired(tc.base, tc.cand)
		assert.Equal(t, tc.rounds, rounds, "%v %v", tc.base, tc.cand)
		assert.Equal(t, tc.wins, wins, "%v %v", tc.base, tc.cand)
		assert.InDelta(t, tc.gain, gain, 1e-12, "%v %v", tc.base, tc.cand)
	}
	assert.Equal(t, []int{1, 2, 3, 4, 4, 5, 6}, []int{tuneWins(1), tuneWins(2), tuneWins(3), tuneWins(4), tuneWins(5), tuneWins(6), tuneWins(7)})
}

// TestTuneFlags: tune refuses bad flags, a knob set in the environment
// (it would hide what tune measures) and a run with nowhere to write,
// before anything is loaded, by name (usage errors, and a missing model
// file as every command's).
func TestTuneFlags(t *testing.T) {
	for _, tc := range []struct {
		env  string
		args []string
		want string
	}{
		{"", []string{"tune"}, "give a model: -m FILE.gguf"},
		{"", []string{"tune", "-m", "nope.gguf"}, "-m nope.gguf"},
		{"", tuneArgsFor("--rounds", "0"), "--rounds 0: must be at least 1"},
		{"", tuneArgsFor("--prompt", "1"), "--prompt 1: must be at least 2"},
		{"", tuneArgsFor("--margin", "1"), "--margin 1: want a fraction in [0, 1)"},
		{"", tuneArgsFor("--kv-type", "f8"), "--kv-type"},
		{"MODRUN_HANDOFF=1", tuneArgsFor(), "MODRUN_HANDOFF=1 is set: tune measures each knob itself"},
		{"MODRUN_TUNING=off", tuneArgsFor(), "MODRUN_TUNING=off (or no cache folder): give --file FILE.json, or --dry-run"},
	} {
		if name, v, ok := strings.Cut(tc.env, "="); ok {
			t.Setenv(name, v)
		}
		code, _, stderr := modrun(t, tc.args...)
		want := 2
		if tc.args[len(tc.args)-1] == "nope.gguf" {
			want = 1 // a missing file, as every command says it
		}
		assert.Equal(t, want, code, "%v: %s", tc.args, stderr)
		assert.Contains(t, stderr, tc.want, "%v", tc.args)
		if name, _, ok := strings.Cut(tc.env, "="); ok {
			os.Unsetenv(name)
		}
	}
}

// TestDevicesListsTuning: `modrun devices` lists the tuning file's
// entries for each device (this build's kernels: the model and its kept
// knobs), counts those measured with other kernels (not taken), and says
// why a bad file could not be read.
func TestDevicesListsTuning(t *testing.T) {
	needVulkan(t)
	inst, err := vk.NewInstance(vk.InstanceOptions{})
	require.NoError(t, err)
	devs, err := inst.Devices()
	inst.Close()
	require.NoError(t, err)
	m, err := mod.Open(tuneModel)
	require.NoError(t, err)
	defer m.Close()
	tu := &vulkan.Tuning{Version: vulkan.TuningVersion}
	key := vulkan.KeyOf(devs[0], m)
	tu.Put(vulkan.TuningEntry{TuningKey: key, Knobs: vulkan.Knobs{"MODRUN_PROMPT_STEPS": "1"}, Date: "2026-11-28T00:00:00Z"})
	old := key
	old.Build = "0000000000000000"
	tu.Put(vulkan.TuningEntry{TuningKey: old, Knobs: vulkan.Knobs{"MODRUN_HANDOFF": "1"}})
	other := key
	other.Device += " (another)"
	tu.Put(vulkan.TuningEntry{TuningKey: other, Knobs: vulkan.Knobs{"MODRUN_VEC_ROWS": "2"}})
	file := filepath.Join(t.TempDir(), "tuning.json")
	require.NoError(t, tu.Save(file))
	t.Setenv("MODRUN_TUNING", file)

	code, out, stderr := modrun(t, "devices")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "    tuned:       "+key.Model+": MODRUN_PROMPT_STEPS=1 ("+file+", 2026-11-28T00:00:00Z)\n")
	assert.Contains(t, out, "    tuned:       1 more in "+file+", measured with other kernels than this modrun's: not taken (modrun tune again)\n")
	assert.NotContains(t, out, "MODRUN_VEC_ROWS=2", "another device's entry")

	code, out, stderr = modrun(t, "devices", "--json")
	require.Equal(t, 0, code, stderr)
	var r struct {
		Devices []struct {
			Tuned      []vulkan.TuningEntry `json:"tuned"`
			TunedStale int                  `json:"tuned_stale"`
		} `json:"devices"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Len(t, r.Devices[0].Tuned, 1)
	assert.Equal(t, key, r.Devices[0].Tuned[0].TuningKey)
	assert.Equal(t, 1, r.Devices[0].TunedStale)

	require.NoError(t, os.WriteFile(file, []byte("{"), 0o644))
	code, out, stderr = modrun(t, "devices")
	require.Equal(t, 0, code, "a bad tuning file is shown, not fatal, in devices: %s", stderr)
	assert.Contains(t, out, "    tuned:       vulkan: tuning file "+file+": ")
}
