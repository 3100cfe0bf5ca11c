package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/modrun/modrun/engine/cpu"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// benchModel is a small trained MoD model (its routed layers take some
// tokens and skip others), the one bench's tests time too.
const benchModel = "../testdata/mod/mod-trained.gguf"

// TestBackendContextAndKV: BackendOptions.ContextLen sizes the runner (the
// default is the model's context, at most DefaultMaxContext), out-of-range
// values and unknown KV cache types are refused, and the CPU runner stops
// at the context length it was given.
func TestBackendContextAndKV(t *testing.T) {
	m, err := mod.Open(benchModel)
	require.NoError(t, err)
	defer m.Close()
	model := m.Config.ContextLen

	o := BackendOptions{Name: BackendCPU}
	ctx, err := o.contextLen(m)
	require.NoError(t, err)
	assert.Equal(t, min(model, DefaultMaxContext), ctx)
	big := *m
	big.Config.ContextLen = 32768
	ctx, err = o.contextLen(&big)
	require.NoError(t, err)
	assert.Equal(t, DefaultMaxContext, ctx, "a long-context model is capped by default")
	big.Config.ContextLen = 32768
	o.ContextLen = 8192
	ctx, err = o.contextLen(&big)
	require.NoError(t, err)
	assert.Equal(t, 8192, ctx, "asked for: more than the default cap")

	for _, bad := range []BackendOptions{{Name: BackendCPU, ContextLen: model + 1}, {Name: BackendCPU, ContextLen: -1}, {Name: BackendCPU, KVType: "q8"}} {
		_, _, err := OpenBackend(m, mod.RoutingRouter, bad)
		assert.Error(t, err, "%+v", bad)
	}

	b, _, err := OpenBackend(m, mod.RoutingRouter, BackendOptions{Name: BackendCPU, ContextLen: 3, KVType: "f16"})
	require.NoError(t, err)
	defer b.Close()
	assert.Equal(t, 3, b.ContextLen())
	assert.Equal(t, "f16", b.Runner.(cpuRunner).KVType(), "the CPU's cache holds halves when asked")
	st, err := StepperOf(b, 2)
	require.NoError(t, err)
	assert.Equal(t, "f16", st.(cpuStepper).KVType(), "and so do its step runner's pages")
	sc, _, err := OpenScorer(m, mod.RoutingRouter, BackendOptions{Name: BackendCPU, KVType: "f16"})
	require.NoError(t, err)
	defer sc.Close()
	assert.Equal(t, "f16", sc.Scorer.(*cpu.Runner).KVType(), "and its scorer's")
	def, _, err := OpenBackend(m, mod.RoutingRouter, BackendOptions{Name: BackendCPU})
	require.NoError(t, err)
	defer def.Close()
	assert.Equal(t, "f32", def.Runner.(cpuRunner).KVType(), "f32 by default on the CPU")
	_, err = b.Feed([]int32{1, 2, 3})
	require.NoError(t, err)
	_, err = b.Feed([]int32{4})
	assert.ErrorContains(t, err, "context length 3")
}

// TestPublicSemanticsRunFast: a model whose routed blocks declare another
// computation than DESIGN.md §3 (the mod.* semantics keys of converted
// public MoD checkpoints) runs on the fast CPU runner (engine/cpu's
// TestPublicLayouts checks it against the reference) and on Vulkan
// (engine/vulkan's TestGeneratePublicLayouts), for generation and scoring
// alike, without a notice.
func TestPublicSemanticsRunFast(t *testing.T) {
	m, err := mod.Open(benchModel)
	require.NoError(t, err)
	defer m.Close()
	require.True(t, m.Config.IsMoD(), "benchModel is a MoD model")
	public := *m
	public.Config.GateTarget = mod.GateTargetMLP
	require.NotEmpty(t, public.Config.Semantics())

	b, notice, err := OpenBackend(&public, mod.RoutingRouter, BackendOptions{Name: BackendCPU})
	require.NoError(t, err)
	defer b.Close()
	assert.Equal(t, BackendCPU, b.Name)
	assert.Empty(t, notice)

	sb, notice, err := OpenScorer(&public, mod.RoutingTopK, BackendOptions{Name: BackendCPU})
	require.NoError(t, err)
	defer sb.Close()
	assert.Equal(t, BackendCPU, sb.Name)
	assert.Empty(t, notice)

	bv, notice, err := OpenBackend(&public, mod.RoutingRouter, BackendOptions{Name: BackendVulkan})
	require.NoError(t, err)
	defer bv.Close()
	assert.True(t, strings.HasPrefix(bv.Name, BackendVulkan), bv.Name)
	assert.Empty(t, notice)
}

// TestChooseFallback: choose opens the CPU backends as named; with auto,
// a Vulkan device that fails (or none, or only a CPU emulation) falls back
// to the CPU with a notice saying why; a named
// device that fails is an error, never a fallback.
func TestChooseFallback(t *testing.T) {
	t.Setenv(vk.EnvDevice, "")
	var tried []string
	failGPU := func(p *place) error {
		tried = append(tried, p.name)
		if p.dev != nil {
			return errors.New("no room on the GPU")
		}
		return nil
	}
	for _, name := range []string{BackendCPU, BackendReference} {
		tried = nil
		p, notice, err := choose(BackendOptions{Name: name, Device: -1}, failGPU)
		require.NoError(t, err)
		assert.Equal(t, name, p.name)
		assert.Nil(t, p.dev)
		assert.Empty(t, notice)
		assert.Equal(t, []string{name}, tried)
	}

	tried = nil
	p, notice, err := choose(BackendOptions{Name: BackendAuto, Device: -1}, failGPU)
	require.NoError(t, err)
	assert.Equal(t, BackendCPU, p.name)
	assert.True(t, strings.HasPrefix(notice, "modrun: ") && strings.HasSuffix(notice, "; running on the CPU"), notice)
	assert.Equal(t, BackendCPU, tried[len(tried)-1])
	if len(tried) == 2 { // a GPU was opened, and its failure is the notice
		assert.Contains(t, notice, "no room on the GPU")
	}

	if vk.Load() != nil {
		t.Log("no Vulkan loader: the Vulkan cases need a device")
		return
	}
	for _, o := range []BackendOptions{{Name: BackendVulkan, Device: -1}, {Name: BackendAuto, Device: 0}} {
		tried = nil
		p, notice, err := choose(o, failGPU)
		assert.EqualError(t, err, "no room on the GPU", "%+v", o)
		assert.Nil(t, p)
		assert.Empty(t, notice)
		require.Len(t, tried, 1, "%+v: no fallback", o)
		assert.True(t, strings.HasPrefix(tried[0], "vulkan: "), tried[0])
	}
}
