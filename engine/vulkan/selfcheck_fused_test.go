package vulkan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fused attentions' self-check cases on lavapipe: decode_attend,
// decode_attend_keys (and its handed-off variant) and paged_attend pass
// theirs, with both caches, at the head dimensions modrun's models have
// (8: stories260K, 48: stories15M, 64, 128) and several chunk counts, so a
// failure on a GPU is the kernel's, not the case's; and each case fails a
// dispatch that leaves a tile out (one workgroup short, or one tile of
// each row-head fewer), whose head's merge never runs or misses entries.
func TestFusedAttentionCheckCases(t *testing.T) {
	dev := openDevice(t, true)
	prof := gpuProfileOf(dev)
	ks := newKernels(dev, &prof, nil)
	defer ks.Close()
	type kcase struct {
		name string
		spec []uint32
	}
	for _, kv := range shaders.KVTypes {
		var cases []kcase
		for _, splits := range []uint32{1, 4, 16} {
			cases = append(cases, kcase{shaders.DecodeAttendName(kv), shaders.DecodeAttendSpec(splits)})
			for _, hd := range []uint32{8, 48, 128} {
				cases = append(cases, kcase{shaders.DecodeAttendKeysName(kv), shaders.DecodeAttendKeysSpec(hd, splits)})
			}
		}
		if h, ok := shaders.HandoffName(shaders.DecodeAttendKeysName(kv)); ok {
			cases = append(cases, kcase{h, shaders.DecodeAttendKeysSpec(64, 16)})
		}
		for _, hd := range []uint32{8, 48, 64, 128} {
			cases = append(cases, kcase{shaders.PagedAttendName(kv), shaders.PagedAttentionSpec(hd)})
		}
		for _, kc := range cases {
			name := fmt.Sprintf("%s%v", kc.name, kc.spec)
			k, err := ks.get(kc.name, kc.spec)
			require.NoError(t, err, name)
			mk, ok := checkerFor(k.v)
			require.True(t, ok, "%s has a check", name)
			c, err := mk(k.v, k.spec)
			require.NoError(t, err, name)
			worst, _, err := runCheck(dev, k, c, false)
			require.NoError(t, err, name)
			assert.LessOrEqual(t, worst, 1.0, "%s: %s", name, c.op)
			t.Logf("%-40s %-28s %.3g of the bound", name, c.op, worst)

			short := c
			if k.v.Op == shaders.OpPagedAttend {
				push := c.push.(shaders.PagedPush)
				push.Splits-- // the last tile of each row-head left out: the second row's last 13 entries unseen
				short.push, short.groups = push, shaders.PagedAttentionGroups(push.N, push.NHead, push.Splits)
			} else {
				short.groups[0]-- // the last head's last chunk: its merge never runs
			}
			worst, _, err = runCheck(dev, k, short, false)
			require.NoError(t, err, name)
			assert.Greater(t, worst, 1.0, "%s: a tile left out passed", name)
		}
	}
}

// Under a GPU's profile (fused attention), opening a model checks the
// decode step's fused attention and a batched step's paged_attend, made at
// open for it, and both pass on lavapipe; a paged_attend whose check fails
// (its result planted in the check cache, as a device whose hand-off
// misbehaves would leave it) is reported in one line, and the model opens
// again without fused attention, whose batched steps (paged_attention and
// attention_merge) match the solo runs as TestVulkanStepMatchesSolo's.
func TestSelfCheckFusedAttention(t *testing.T) {
	dev := openDevice(t, true)
	gpu := gpuProfileOf(dev)
	require.True(t, gpu.FuseAttention)
	m := openModel(t, "../../models/tinystories-mod.gguf")
	var log strings.Builder
	run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &gpu, KVType: "f16", SelfCheckLog: &log})
	require.NoError(t, err)
	defer run.Close()
	assert.Empty(t, log.String())
	var paged *kernel
	fused := 0
	for _, k := range run.ks.made {
		switch k.v.Op {
		case shaders.OpPagedAttend:
			paged = k
		case shaders.OpDecodeAttend:
			fused++
		}
	}
	require.NotNil(t, paged, "paged_attend made at open")
	require.Positive(t, fused, "the decode step's fused attention")
	c, ok := run.ks.check(paged, false)
	require.True(t, ok)
	assert.True(t, c.Pass, "%s: %.3g of its bound; %s", c.Variant(), c.Worst, c.Err)

	key := fmt.Sprint(deviceKey(dev.Info()), "|", paged.v.Name, paged.spec, gpu.RequiredSubgroupSize(paged.v), false)
	checkCache.Lock()
	kept := checkCache.m[key]
	checkCache.m[key] = SelfCheck{Op: c.Op, Kernel: c.Kernel, Spec: c.Spec, Worst: 3}
	checkCache.Unlock()
	t.Cleanup(func() {
		checkCache.Lock()
		checkCache.m[key] = kept
		checkCache.Unlock()
	})
	again, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &gpu, KVType: "f16", SelfCheckLog: &log})
	require.NoError(t, err)
	defer again.Close()
	assert.Equal(t, "modrun: self-check: kernel paged_attend_f16"+fmt.Sprint(paged.spec)+" fails on device "+dev.Info().Name+
		" (3 times its tolerance off the CPU): using paged_attention_f16 + attention_merge\n", log.String())
	assert.False(t, again.ks.prof.FuseAttention)
	for _, k := range again.ks.made {
		assert.NotEqual(t, shaders.OpPagedAttend, k.v.Op)
		assert.NotEqual(t, shaders.OpDecodeAttend, k.v.Op)
	}
	fb := again.ks.prof
	vulkanStepMatchesSolo(t, dev, &fb, m, mod.RoutingRouter, "f16", 8)
}
