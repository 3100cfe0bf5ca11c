package vulkan

import (
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/synthtest"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
	"github.com/modrun/modrun/vk/vktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// handoffModel is the fixture at path with every block matrix and the
// output in Q8_0 (those whose rows are whole blocks: the fixtures' down
// rows of 172 stay F32): the type whose GPU-profile decode matvec
// (matvec_rows) has a handoff variant.
func handoffModel(t *testing.T, path string) *mod.Model {
	t.Helper()
	m := openModel(t, path)
	for l := range m.Weights.Blocks {
		b := &m.Weights.Blocks[l]
		for _, mt := range []*mod.Mat{&b.Q, &b.K, &b.V, &b.O, &b.Gate, &b.Up, &b.Down} {
			if mt.Cols%32 == 0 {
				requantize(t, mt, gguf.TypeQ8_0)
			}
		}
	}
	if m.Weights.Output.Cols != 0 {
		requantize(t, &m.Weights.Output, gguf.TypeQ8_0)
	}
	return m
}

// openHandoffDevice is openDevice with the validation layer but not its
// synchronization validation, which knows barriers only: it reports each
// one the hand-off leaves out, on purpose, as a hazard. The hand-off's
// order is checked instead by its results, bit for bit those of the step
// with barriers (which the other tests run under synchronization
// validation).
func openHandoffDevice(t *testing.T) *vk.Device {
	t.Helper()
	return vktest.Open(t, vk.InstanceOptions{Validation: true, NoSyncValidation: true})
}

// TestDecodeHandoff: the GPU profile's decode step with the hand-off
// (Profile.Handoff) gives the logits of the step with barriers, bit for
// bit, token after token (the same kernels' arithmetic: only the order
// between dispatches is kept another way), for a dense model and a MoD
// model whose routed blocks keep their barriers between handoff kernels;
// and its recording has the same dispatches and almost no barriers: one
// after the embedding, and one before the logits' copy to the host.
func TestDecodeHandoff(t *testing.T) {
	dev := openHandoffDevice(t)
	prof, ok := testProfiles(t, dev)["gpu-subgroup"]
	if !ok {
		t.Skip("the handoff matvecs are matvec_rows's, which need subgroup arithmetic")
	}
	for _, tc := range []struct {
		name    string
		m       *mod.Model
		routing mod.Routing
		tokens  int
	}{
		// Q8_0 throughout (synthtest's Tiny: every matrix a handoff matvec):
		// dense, and routed at capacity 0.25.
		{"tiny-q8_0", synthtest.Build(t, gguf.TypeQ8_0, 0).Model, mod.RoutingRouter, 12},
		{"tiny-q8_0-mod", synthtest.Build(t, gguf.TypeQ8_0, 0.25).Model, mod.RoutingRouter, 12},
		// A fixture's F32 down between handoff kernels (barriers around it),
		// and its predictor routing.
		{"mod-rand-sigmoid-pred", handoffModel(t, "../../testdata/mod/mod-rand-sigmoid-pred.gguf"), mod.RoutingPredictor, 8},
	} {
		m, path := tc.m, tc.name
		with := *prof
		with.Handoff = true
		barriers, err := New(dev, m, tc.routing, Options{DeviceProfile: prof})
		require.NoError(t, err)
		defer barriers.Close()
		handoff, err := New(dev, m, tc.routing, Options{DeviceProfile: &with})
		require.NoError(t, err)
		defer handoff.Close()
		require.True(t, handoff.ks.prof.Handoff, "no kernel failed its self-check")

		for i := 0; i < tc.tokens; i++ {
			tok := int32((7*i + 3) % m.Config.NVocab)
			want, err := barriers.Feed([]int32{tok})
			require.NoError(t, err)
			got, err := handoff.Feed([]int32{tok})
			require.NoError(t, err)
			require.Equal(t, f32Bits(want), f32Bits(got), "%s token %d: the logits, bit for bit", path, i)
		}
		wantTok, err := barriers.FeedArgmax([]int32{5})
		require.NoError(t, err)
		gotTok, err := handoff.FeedArgmax([]int32{5})
		require.NoError(t, err)
		assert.Equal(t, wantTok, gotTok, "%s: the greedy step", path)

		b, h := barriers.StepCounts(), handoff.StepCounts()
		t.Logf("%s: barriers %+v, handoff %+v", path, b, h)
		assert.Equal(t, b.Dispatches, h.Dispatches, "%s: the same dispatches", path)
		handoffs := 0
		for _, k := range handoff.ks.made {
			if shaders.IsHandoff(k.v) {
				handoffs++
			}
		}
		assert.Positive(t, handoffs, "%s: handoff kernels made", path)
		switch path {
		case "tiny-q8_0":
			assert.Equal(t, 2, h.Barriers, "%s: after the embedding, before the logits' copy (%d with barriers)", path, b.Barriers)
			assert.Equal(t, []int{1, 0, 0, 0}, h.BlockBarriers, "%s: the first block's after the embedding", path)
		default:
			assert.Less(t, h.Barriers, b.Barriers, path)
		}
	}
}

// TestHandoffEnv: MODRUN_HANDOFF turns the hand-off on or off in the
// device's own profile, is refused by name otherwise, and leaves a
// profile given in Options as it is.
func TestHandoffEnv(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/dense-rand.gguf")
	for _, tc := range []struct {
		env  string
		want bool
	}{{"1", true}, {"0", false}} {
		t.Setenv("MODRUN_HANDOFF", tc.env)
		run, err := New(dev, m, mod.RoutingRouter, Options{KVType: "f32"})
		require.NoError(t, err)
		assert.Equal(t, tc.want, run.ks.prof.Handoff, "MODRUN_HANDOFF=%s", tc.env)
		_, err = run.Feed([]int32{1, 2, 3})
		assert.NoError(t, err, "MODRUN_HANDOFF=%s", tc.env)
		run.Close()
	}
	own := DeviceProfile(dev.Info())
	t.Setenv("MODRUN_HANDOFF", "1")
	run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &own})
	require.NoError(t, err)
	assert.False(t, run.ks.prof.Handoff, "a given profile is kept")
	run.Close()
	t.Setenv("MODRUN_HANDOFF", "yes")
	_, err = New(dev, m, mod.RoutingRouter, Options{})
	assert.ErrorContains(t, err, `MODRUN_HANDOFF="yes": want 1`)
}

// TestHandoffStall: a step whose stall flag came back set fails by name,
// saying how to run without the hand-off.
func TestHandoffStall(t *testing.T) {
	dev := openHandoffDevice(t)
	prof, ok := testProfiles(t, dev)["gpu-subgroup"]
	if !ok {
		t.Skip("the handoff matvecs need subgroup arithmetic")
	}
	with := *prof
	with.Handoff = true
	m := handoffModel(t, "../../testdata/mod/dense-rand.gguf")
	run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &with})
	require.NoError(t, err)
	defer run.Close()
	require.NoError(t, run.checkHandoff())
	require.NoError(t, run.handHost.Upload(u32Bytes([]uint32{1}), 0))
	assert.ErrorContains(t, run.checkHandoff(), "run with MODRUN_HANDOFF=0")
	_, err = run.Feed([]int32{1}) // the step copies the flag back: clear
	assert.NoError(t, err)
}

// TestHandoffSelfCheck: with the hand-off, `devices --check` and the
// self-check at load check each handoff matvec (and the head's
// argmax_wide, and the fused decode attention on each cache) on the
// base's case, its wait satisfied and its count checked.
func TestHandoffSelfCheck(t *testing.T) {
	dev := openDevice(t, true)
	prof, ok := testProfiles(t, dev)["gpu-subgroup"]
	if !ok {
		t.Skip("the handoff matvecs need subgroup arithmetic")
	}
	with := *prof
	with.Handoff = true
	ks := newKernels(dev, &with, nil)
	defer ks.Close()
	found := 0
	for _, p := range profilePicks(with) { // devices --check's list; only the handoff picks run (the others have their own tests)
		if !shaders.IsHandoff(shaders.Variant{Name: p.name}) {
			continue
		}
		found++
		k, err := ks.get(p.name, p.spec)
		require.NoError(t, err)
		c, ok := ks.check(k, false)
		require.True(t, ok, "%s has a check", p.name)
		assert.True(t, c.Pass, "%s: %s", c.Variant(), c.Err)
	}
	assert.Equal(t, len(shaders.HandoffMatvecTypes)*3+1+len(shaders.KVTypes), found,
		"every handoff matvec, the head's argmax_wide and decode_attend_keys")
}
