package vulkan

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// h200Like is info as an NVIDIA GPU with tensor cores would describe
// itself, but for the rest of lavapipe's facts: enough for a profile
// (ProfileWith, KnobsDiffer), never opened.
func h200Like(info vk.DeviceInfo) vk.DeviceInfo {
	info.Type, info.VendorID, info.Name = vk.Discrete, shaders.VendorNVIDIA, "NVIDIA H200 (facts only)"
	info.Limits.SubgroupSize, info.Limits.MinSubgroupSize, info.Limits.MaxSubgroupSize = 32, 32, 32
	info.Limits.MaxComputeSharedMemorySize, info.Limits.MaxComputeWorkGroupInvocations = 48<<10, 1024
	info.Features.SubgroupArithmetic, info.Features.SubgroupShuffle, info.Features.SubgroupBallot = true, true, true
	info.Features.ShaderFloat16, info.Features.CooperativeMatrixNV = true, true
	return info
}

// Options.Knobs set a runner's knobs as the variables do; a variable set
// in the environment wins over the knob; a value a knob does not take, and
// a knob that does not exist, are refused by name when the runner opens.
func TestKnobsOverEnv(t *testing.T) {
	dev := openDevice(t, false)
	sm := stepModelsVK(t)[0]
	run, err := New(dev, sm.m, sm.routing, Options{Knobs: Knobs{"MODRUN_VEC_ROWS": "3", "MODRUN_PROMPT_STEPS": "2"}})
	require.NoError(t, err)
	assert.Equal(t, 3, run.vecRows())
	assert.Equal(t, 2, run.promptSteps)
	run.Close()

	t.Setenv("MODRUN_VEC_ROWS", "5")
	run, err = New(dev, sm.m, sm.routing, Options{Knobs: Knobs{"MODRUN_VEC_ROWS": "3"}})
	require.NoError(t, err)
	assert.Equal(t, 5, run.vecRows(), "the environment wins")
	run.Close()
	assert.Equal(t, "MODRUN_PROMPT_STEPS=2 MODRUN_VEC_ROWS=3 (the environment's 5 wins)", Knobs{"MODRUN_VEC_ROWS": "3", "MODRUN_PROMPT_STEPS": "2"}.Describe())
	os.Unsetenv("MODRUN_VEC_ROWS")

	for _, tc := range []struct {
		k    Knobs
		want string
	}{
		{Knobs{"MODRUN_VEC_ROWS": "99"}, `MODRUN_VEC_ROWS="99"`},
		{Knobs{"MODRUN_HANDOFF": "yes"}, `MODRUN_HANDOFF="yes"`},
		{Knobs{"MODRUN_TENSOR_CORES": "2"}, `MODRUN_TENSOR_CORES="2"`},
		{Knobs{"MODRUN_PROMPT_STEPS": "0"}, `MODRUN_PROMPT_STEPS="0"`},
		{Knobs{"MODRUN_MATVEC_ROWS": "2"}, `MODRUN_MATVEC_ROWS="2"`},
		{Knobs{"MODRUN_ATTEND_KEYS": "no"}, `MODRUN_ATTEND_KEYS="no"`},
		{Knobs{"MODRUN_ATTEND_OWN": "off"}, `MODRUN_ATTEND_OWN="off"`},
		{Knobs{"MODRUN_HANDOF": "1"}, `no knob "MODRUN_HANDOF"`},
	} {
		_, err := New(dev, sm.m, sm.routing, Options{Knobs: tc.k})
		assert.ErrorContains(t, err, tc.want, "%v", tc.k)
	}
}

// KnobsDiffer tells a knob that changes what runs on a device from one
// the device cannot act on: the tensor-core knobs change a tensor-core
// GPU's profile and not lavapipe's; a runner's own knobs change both.
func TestKnobsDiffer(t *testing.T) {
	own := openDevice(t, false).Info()
	gpu := h200Like(own)
	p, err := ProfileWith(gpu, nil)
	require.NoError(t, err)
	require.True(t, p.MatmulCoop, "the GPU facts give the tensor-core matmul")
	for _, tc := range []struct {
		knob, value string
		own, gpu    bool
	}{
		{"MODRUN_TENSOR_CORES", "0", false, true},
		{"MODRUN_MATMUL_DIRECT", "1", false, true},
		{"MODRUN_ATTENTION_COOP", "1", false, true},
		{"MODRUN_MATVEC_ROWS", "0", false, true},
		{"MODRUN_ATTEND_KEYS", "0", false, true},
		{"MODRUN_ATTEND_OWN", "0", false, true},
		{"MODRUN_HANDOFF", "1", true, true},
		{"MODRUN_PROMPT_STEPS", "1", true, true},
		{"MODRUN_VEC_ROWS", "4", true, true},
	} {
		for _, d := range []struct {
			info vk.DeviceInfo
			want bool
		}{{own, tc.own}, {gpu, tc.gpu}} {
			got, err := KnobsDiffer(d.info, Knobs{}, Knobs{tc.knob: tc.value})
			require.NoError(t, err)
			assert.Equal(t, d.want, got, "%s=%s on %s", tc.knob, tc.value, d.info.Name)
		}
	}
	// What the decode knobs change on the GPU: the quantized matvec's
	// kernel (and the batched rows), and the fused attention's.
	off, err := ProfileWith(gpu, Knobs{"MODRUN_MATVEC_ROWS": "0", "MODRUN_ATTEND_KEYS": "0", "MODRUN_ATTEND_OWN": "0"})
	require.NoError(t, err)
	rows, _ := p.Matvec(shaders.MatvecQ8_0, shaders.FuseNone, 1, 4096)
	sg, _ := off.Matvec(shaders.MatvecQ8_0, shaders.FuseNone, 1, 4096)
	assert.Equal(t, shaders.MatvecFusedName(shaders.MatvecQ8_0, shaders.ReduceSubgroupRows, shaders.FuseNone), rows)
	assert.Equal(t, shaders.MatvecFusedName(shaders.MatvecQ8_0, shaders.ReduceSubgroup, shaders.FuseNone), sg)
	assert.Equal(t, []int{16, 8}, []int{p.VecRows(), off.VecRows()})
	assert.True(t, p.AttendKeys)
	assert.False(t, off.AttendKeys)
	assert.True(t, p.AttendOwn)
	assert.False(t, off.AttendOwn)
	_, err = KnobsDiffer(gpu, Knobs{}, Knobs{"MODRUN_MATMUL_DIRECT": "2"})
	assert.ErrorContains(t, err, "MODRUN_MATMUL_DIRECT")
}

// The tuning file: kept whole, an entry per key (a second Put of a key
// replaces it), found only under the key it was measured with; a missing
// file is empty; a file that is not one, of another version, or with a
// knob or value the engine refuses, is an error naming the file.
func TestTuningFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "tuning.json")
	tu, err := LoadTuning(path)
	require.NoError(t, err)
	assert.Empty(t, tu.Entries)

	info := openDevice(t, false).Info()
	m := openModel(t, "../../testdata/mod/mod-rand-sigmoid-pred.gguf")
	key := KeyOf(info, m)
	assert.Equal(t, shaders.BuildID()+".knobs"+strconv.Itoa(KnobsRevision), key.Build)
	assert.Contains(t, key.Model, "routed ")
	assert.Contains(t, key.Model, "predictor ")
	tu.Put(TuningEntry{TuningKey: key, Knobs: Knobs{"MODRUN_HANDOFF": "1"}})
	other := key
	other.Driver += " (another version)"
	tu.Put(TuningEntry{TuningKey: other, Knobs: Knobs{"MODRUN_VEC_ROWS": "2"}})
	tu.Put(TuningEntry{TuningKey: key, Knobs: Knobs{"MODRUN_PROMPT_STEPS": "1"}})
	require.NoError(t, tu.Save(path))

	back, err := LoadTuning(path)
	require.NoError(t, err)
	require.Len(t, back.Entries, 2)
	e, ok := back.Lookup(key)
	require.True(t, ok)
	assert.Equal(t, Knobs{"MODRUN_PROMPT_STEPS": "1"}, e.Knobs, "the second Put replaced the first")
	for _, change := range []func(k *TuningKey){
		func(k *TuningKey) { k.Build = "0123456789abcdef" }, // other kernels
		func(k *TuningKey) { k.Build = shaders.BuildID() },  // these kernels, chosen among before KnobsRevision
		func(k *TuningKey) { k.Build = fmt.Sprintf("%s.knobs%d", shaders.BuildID(), KnobsRevision-1) },
		func(k *TuningKey) { k.Model += " F16:1" }, // another model
		func(k *TuningKey) { k.DeviceID++ },        // another device
	} {
		k := key
		change(&k)
		_, ok := back.Lookup(k)
		assert.False(t, ok, "%+v", k)
	}

	t.Setenv("MODRUN_TUNING", path)
	k, p, err := TunedKnobs(info, m)
	require.NoError(t, err)
	assert.Equal(t, Knobs{"MODRUN_PROMPT_STEPS": "1"}, k)
	assert.Equal(t, path, p)
	t.Setenv("MODRUN_TUNING", "off")
	k, p, err = TunedKnobs(info, m)
	require.NoError(t, err)
	assert.Nil(t, k)
	assert.Empty(t, p)
	t.Setenv("MODRUN_TUNING", "")
	t.Setenv("XDG_CACHE_HOME", dir)
	assert.Equal(t, filepath.Join(dir, "modrun", "tuning.json"), TuningPath())

	for _, tc := range []struct{ text, want string }{
		{"not json", "invalid character"},
		{`{"version": 2, "entries": []}`, "version 2, this modrun reads 1"},
		{`{"version": 1, "entries": [{"knobs": {"MODRUN_HANDOFF": "2"}}]}`, `entry 0: MODRUN_HANDOFF="2"`},
		{`{"version": 1, "entries": [{"knobs": {"MODRUN_VEC_ROWS": "x"}}]}`, `entry 0: MODRUN_VEC_ROWS="x"`},
		{`{"version": 1, "entries": [{"knobs": {"MODRUN_FAST": "1"}}]}`, `entry 0: no knob "MODRUN_FAST"`},
		{`{"version": 1, "entries": [], "extra": 1}`, `unknown field "extra"`},
		{`{"version": 1, "entries": []} {}`, "more after the tuning's JSON object"},
	} {
		bad := filepath.Join(dir, "bad.json")
		require.NoError(t, os.WriteFile(bad, []byte(tc.text), 0o644))
		_, err := LoadTuning(bad)
		assert.ErrorContains(t, err, "tuning file "+bad+": ", tc.text)
		assert.ErrorContains(t, err, tc.want, tc.text)
		assert.ErrorContains(t, err, "MODRUN_TUNING=off", tc.text)
		t.Setenv("MODRUN_TUNING", bad)
		_, _, err = TunedKnobs(info, m)
		assert.ErrorContains(t, err, bad, "a run of any model stops at a bad file")
	}
}

// FuzzLoadTuning: whatever a tuning file holds, LoadTuning returns a
// tuning or an error naming the file, never panics; a tuning it accepts
// saves and loads back the same.
func FuzzLoadTuning(f *testing.F) {
	f.Add([]byte(`{"version": 1, "entries": [{"device": "d", "vendor_id": 1, "device_id": 2, "driver": "x 1", "build": "b", "model": "m", "knobs": {"MODRUN_HANDOFF": "1", "MODRUN_VEC_ROWS": "8"}, "date": "2026-11-28T00:00:00Z", "trials": [{"knob": "MODRUN_HANDOFF", "value": "1", "base": {}, "metric": "decode", "prompt_tokens": 512, "chosen": true, "why": "taken"}]}]}`))
	f.Add([]byte(`{"version": 1, "entries": [{"knobs": {"MODRUN_PROMPT_STEPS": "0"}}]}`))
	f.Add([]byte(`{"version": 1, "entries": null}`))
	f.Add([]byte(`{"version": 1, "entries": [{"knobs": {"MODRUN_MATMUL_DIRECT": "resident"}}]} trailing`))
	f.Add([]byte(``))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "t.json")
		require.NoError(t, os.WriteFile(path, b, 0o644))
		tu, err := LoadTuning(path)
		if err != nil {
			require.ErrorContains(t, err, "tuning file "+path+": ")
			return
		}
		again := filepath.Join(dir, "again.json")
		require.NoError(t, tu.Save(again))
		back, err := LoadTuning(again)
		require.NoError(t, err)
		assert.Equal(t, len(tu.Entries), len(back.Entries))
		for i := range tu.Entries {
			assert.Equal(t, tu.Entries[i].TuningKey, back.Entries[i].TuningKey)
			assert.Equal(t, tu.Entries[i].Knobs.String(), back.Entries[i].Knobs.String())
		}
	})
}
