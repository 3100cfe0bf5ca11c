package shaders

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// handoffReady is the count a kernel test presets in slot 1 and a handoff
// kernel waits for there (withHandoff).
const handoffReady = 5

// withHandoff is a dispatch of kernel k with push and binds as its base
// variant takes them, made right for k: unchanged for a kernel that is not
// a handoff variant; for one, push followed by a wait on slot 1 (preset
// to handoffReady: satisfied, as the step's wait once the dispatch before
// is done) and its own slot 2, and a handoff buffer bound last. At cleanup
// it checks that the stall flag stayed 0 and that slot 2 counted every
// workgroup of each run of the dispatch. The kernel tests of the handoff
// variants' families (matvec_rows, decode_attend_keys, argmax_wide) run
// their handoff variants through it, so that those are checked against the
// CPU reference as their base variants are.
func withHandoff(t testing.TB, dev *vk.Device, k *vk.Kernel, push []byte, groups [3]uint32, binds []vk.Bind) ([]byte, []vk.Bind) {
	t.Helper()
	if !strings.HasSuffix(k.Spec().Name, HandoffSuffix) {
		return push, binds
	}
	hand := newBuffer(t, dev, u32bytes([]uint32{0, handoffReady, 0}))
	total := groups[0] * groups[1] * groups[2]
	t.Cleanup(func() {
		got := downloadU32(t, hand, 3)
		assert.Equal(t, uint32(0), got[HandoffStallWord], "%s: no wait stalled", k.Spec().Name)
		assert.Equal(t, uint32(handoffReady), got[1], "%s: the slot waited on is only read", k.Spec().Name)
		assert.True(t, got[2] > 0 && got[2]%total == 0, "%s: its slot counts each of its %d workgroups once a run: %d", k.Spec().Name, total, got[2])
	})
	push = append(append([]byte(nil), push...), vk.MustPackPush(HandoffPush{HandWait: 1, HandNeed: handoffReady, HandSlot: 2})...)
	return push, append(append([]vk.Bind(nil), binds...), vk.Bind{Buf: hand, Access: vk.ReadWrite})
}

// TestHandoffVariants: each handoff variant is its base variant's source
// and bindings with the handoff buffer last, and its push constants with
// HandoffPush's after them (TestVariantInterfaces checks both against the
// SPIR-V); every kernel a GPU profile's dense decode step takes for the
// types of HandoffMatvecTypes has one; the self-check's fallback of a
// handoff variant is its base with the profile's Handoff off.
func TestHandoffVariants(t *testing.T) {
	var names []string
	for _, v := range Variants {
		if !IsHandoff(v) {
			continue
		}
		names = append(names, v.Name)
		base := lookup(t, HandoffBase(v.Name))
		assert.Equal(t, base.Source, v.Source, v.Name)
		assert.Equal(t, base.Bindings, v.Bindings[:len(v.Bindings)-1], v.Name)
		assert.Equal(t, "handoff", v.Bindings[len(v.Bindings)-1].Name, v.Name)
		assert.Contains(t, v.Defines, fmt.Sprintf("HANDOFF_BINDING=%d", len(base.Bindings)), v.Name)
		assert.Equal(t, base.PushBytes()+12, v.PushBytes(), v.Name)
		assert.Equal(t, base.Spec, v.Spec, v.Name)
		assert.Equal(t, [4]string{base.Op, base.Type, base.Fusion, base.Reduce}, [4]string{v.Op, v.Type, v.Fusion, v.Reduce}, v.Name)
		h, ok := HandoffName(base.Name)
		assert.True(t, ok, v.Name)
		assert.Equal(t, v.Name, h)

		p := NewProfile(smallGPU)
		p.Handoff = true
		fb, safe, ok := p.Fallback(v)
		require.True(t, ok, v.Name)
		assert.Equal(t, base.Name, safe)
		assert.False(t, fb.Handoff, v.Name)
		fb.Handoff = true
		assert.Equal(t, p, fb, "%s: only Handoff changes", v.Name)
	}
	// The GPU profile's dense decode step on the types measured.
	gpu := NewProfile(smallGPU)
	var want []string
	for _, typ := range HandoffMatvecTypes {
		for _, fuse := range handoffMatvecFusions {
			name, _ := gpu.Matvec(typ, fuse, 1, 4096)
			want = append(want, name+HandoffSuffix)
		}
	}
	for _, kv := range KVTypes {
		st := gpu.DecodeAttention(kv, 256, 64)
		require.Len(t, st, 1)
		want = append(want, st[0].Variant+HandoffSuffix)
	}
	want = append(want, gpu.Head()[len(gpu.Head())-1].Variant+HandoffSuffix)
	assert.ElementsMatch(t, want, names)
	_, ok := HandoffName("rmsnorm")
	assert.False(t, ok, "a kernel without a handoff variant")

	// WithHandoff packs as the block lays it out: the base's, then the three.
	got := vk.MustPackPush(WithHandoff(MatvecPush{Rows: 1, Cols: 2, N: 3, Eps: 0.5}, HandoffPush{HandWait: 4, HandNeed: 5, HandSlot: 6}))
	want2 := append(vk.MustPackPush(MatvecPush{Rows: 1, Cols: 2, N: 3, Eps: 0.5}), vk.MustPackPush(HandoffPush{4, 5, 6})...)
	assert.Equal(t, want2, got)
	assert.Equal(t, reflect.TypeOf(WithHandoff(ArgmaxPush{}, HandoffPush{})), reflect.TypeOf(WithHandoff(ArgmaxPush{Cols: 9}, HandoffPush{HandSlot: 1})),
		"one type a base")
}

// TestMatvecHandoff: each handoff matvec gives its base variant's output
// bit for bit (the same arithmetic in the same order; TestMatvecRows
// checks the base against the CPU), with its wait satisfied, on ragged
// rows; and a wait that is never satisfied gives up, sets the stall flag,
// and still computes: the step's host check then finds the flag, and the
// GPU is not hung.
func TestMatvecHandoff(t *testing.T) {
	dev := openDevice(t)
	d := deviceOf(dev)
	if !d.SubgroupArithmetic || d.SubgroupSize == 0 {
		t.Skip("matvec_rows needs subgroup arithmetic and a known subgroup size; this device has neither sure")
	}
	const eps = 1e-5
	spec := MatvecRowsSpec(d.SubgroupSize)
	for _, typ := range HandoffMatvecTypes {
		var gt gguf.TensorType
		found := false
		for g, name := range matvecTypeOf {
			if name == typ {
				gt, found = g, true
			}
		}
		require.True(t, found, "%s: a GGUF type", typ)
		for _, fuse := range handoffMatvecFusions {
			base := lookup(t, MatvecFusedName(typ, ReduceSubgroupRows, fuse))
			h := lookup(t, base.Name+HandoffSuffix)
			kb, kh := newKernel(t, dev, base, spec...), newKernel(t, dev, h, spec...)
			rows := 67
			wRows := rows
			if fuse == FuseNormSwiGLU {
				wRows = 2 * rows
			}
			c, err := newMatvecCase(gt, wRows, 512, 1, int64(len(typ)+len(fuse)))
			require.NoError(t, err)
			want, _, _ := runFused(t, dev, kb, c, fuse, rows, eps)
			got, _, _ := runFused(t, dev, kh, c, fuse, rows, eps)
			assert.Equal(t, bitsOf(want), bitsOf(got), "%s: as %s, bit for bit", h.Name, base.Name)
		}
	}

	// A wait on a count that never comes.
	v := lookup(t, MatvecFusedName(MatvecQ8_0, ReduceSubgroupRows, FuseAdd)+HandoffSuffix)
	k := newKernel(t, dev, v, spec...)
	c, err := newMatvecCase(gguf.TypeQ8_0, 40, 64, 1, 3)
	require.NoError(t, err)
	y := newBuffer(t, dev, f32bytes(make([]float32, 40)))
	hand := newBuffer(t, dev, u32bytes([]uint32{0, 2, 0}))
	groups := MatvecGroups(40, spec)
	rec := dev.NewRecorder()
	defer rec.Close()
	rec.Dispatch(k, vk.MustPackPush(WithHandoff(MatvecPush{Rows: 40, Cols: 64, N: 1}, HandoffPush{HandWait: 1, HandNeed: 3, HandSlot: 2})), groups,
		denseBind(newBuffer(t, dev, c.gpu), vk.Read), denseBind(newBuffer(t, dev, f32bytes(c.x)), vk.Read), denseBind(y, vk.ReadWrite), denseBind(hand, vk.ReadWrite))
	require.NoError(t, dev.Run(rec))
	assert.Equal(t, []uint32{1, 2, groups[0] * groups[1]}, downloadU32(t, hand, 3), "stalled: flagged, and every workgroup went on and counted")
	got := download(t, y, 40)
	for i, w := range c.want {
		assert.InDelta(t, w, float64(got[i]), 1e-3*(c.scale[i]+1), "row %d computed after the stall", i)
	}
}

// bitsOf is x's bits, so that NaNs compare equal to themselves.
func bitsOf(x []float32) []uint32 {
	out := make([]uint32, len(x))
	for i, v := range x {
		out[i] = math.Float32bits(v)
	}
	return out
}
