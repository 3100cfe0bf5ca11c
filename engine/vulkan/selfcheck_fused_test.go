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
// decode_attend_keys (and its handed-off variant), paged_attend and
// paged_attend_own pass theirs, with both caches, at the head dimensions modrun's models have
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
			cases = append(cases, kcase{shaders.PagedAttendName(kv), shaders.PagedAttentionSpec(hd)},
				kcase{shaders.PagedAttendOwnName(kv), shaders.PagedAttentionSpec(hd)})
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
// decode step's fused attention and a batched step's paged_attend and
// paged_attend_own, made at open for it, and all pass on lavapipe. A
// kernel whose check fails (its result planted in the check cache, as a
// device whose hand-off misbehaves would leave it) is reported in one
// line, and the model opens again without it: without fused attention
// for paged_attend (paged_attention and attention_merge, and
// paged_attend_own with it), with paged_qkv and paged_attend apart for
// paged_attend_own; either way its batched steps match the solo runs as
// TestVulkanStepMatchesSolo's.
func TestSelfCheckFusedAttention(t *testing.T) {
	dev := openDevice(t, true)
	gpu := gpuProfileOf(dev)
	require.True(t, gpu.FuseAttention)
	require.True(t, gpu.AttendOwn)
	m := openModel(t, "../../models/tinystories-mod.gguf")
	var log strings.Builder
	run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &gpu, KVType: "f16", SelfCheckLog: &log})
	require.NoError(t, err)
	defer run.Close()
	assert.Empty(t, log.String())
	var paged, own *kernel
	fused := 0
	for _, k := range run.ks.made {
		switch {
		case shaders.IsAttendOwn(k.v):
			own = k
		case k.v.Op == shaders.OpPagedAttend:
			paged = k
		case k.v.Op == shaders.OpDecodeAttend:
			fused++
		}
	}
	require.NotNil(t, paged, "paged_attend made at open")
	require.NotNil(t, own, "paged_attend_own made at open")
	require.Positive(t, fused, "the decode step's fused attention")
	for _, tc := range []struct {
		k         *kernel
		safe      string
		fuse      bool // the fused attentions kept
		notMade   func(shaders.Variant) bool
		madeStill string
	}{
		{paged, "paged_attention_f16 + attention_merge", false,
			func(v shaders.Variant) bool { return v.Op == shaders.OpPagedAttend || v.Op == shaders.OpDecodeAttend }, ""},
		{own, "paged_qkv_f16 + paged_attend_f16", true, shaders.IsAttendOwn, paged.v.Name},
	} {
		t.Run(tc.k.v.Name, func(t *testing.T) {
			c, ok := run.ks.check(tc.k, false)
			require.True(t, ok)
			assert.True(t, c.Pass, "%s: %.3g of its bound; %s", c.Variant(), c.Worst, c.Err)
			key := fmt.Sprint(deviceKey(dev.Info()), "|", tc.k.v.Name, tc.k.spec, gpu.RequiredSubgroupSize(tc.k.v), false)
			checkCache.Lock()
			kept := checkCache.m[key]
			checkCache.m[key] = SelfCheck{Op: c.Op, Kernel: c.Kernel, Spec: c.Spec, Worst: 3}
			checkCache.Unlock()
			defer func() {
				checkCache.Lock()
				checkCache.m[key] = kept
				checkCache.Unlock()
			}()
			var log strings.Builder
			again, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &gpu, KVType: "f16", SelfCheckLog: &log})
			require.NoError(t, err)
			defer again.Close()
			assert.Equal(t, "modrun: self-check: kernel "+tc.k.v.Name+fmt.Sprint(tc.k.spec)+" fails on device "+dev.Info().Name+
				" (3 times its tolerance off the CPU): using "+tc.safe+"\n", log.String())
			assert.Equal(t, tc.fuse, again.ks.prof.FuseAttention)
			assert.False(t, again.ks.prof.AttendOwn)
			made := map[string]bool{}
			for _, k := range again.ks.made {
				assert.False(t, tc.notMade(k.v), k.v.Name)
				made[k.v.Name] = true
			}
			if tc.madeStill != "" {
				assert.True(t, made[tc.madeStill], "%s still made", tc.madeStill)
			}
			fb := again.ks.prof
			vulkanStepMatchesSolo(t, dev, &fb, m, mod.RoutingRouter, "f16", 8)
		})
	}
}
