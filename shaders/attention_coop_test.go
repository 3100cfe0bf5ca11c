package shaders

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// coopScale is scale widened for attention_coop, whose scores are Qhi.K +
// Qlo.K summed in another order than the oracle's and whose P is a high
// and a low half:
//   - Q's split: |q - qhi - qlo| <= 2^-21 |q| + 2^-24 (the low half
//     rounded to a half, to nearest or toward zero, subnormal below
//     2^-14); K is exact (an F16 cache);
//   - the 2hd exact products summed in f32 in any order, times the scale:
//     within gamma(2hd+1) of their sum of magnitudes (Higham 3.1), beside
//     the oracle's own gamma(hd);
//
// so a score may differ by delta = ((gamma(hd) + gamma(2hd+1)(1+2^-10) +
// 2^-21) sum_d |q_d k_e,d| + 2^-24 sum_d |k_e,d|) / sqrt(hd), which moves
// an output by at most (exp(2 delta) - 1) sum_e p_e |v_e[d]| (lanesScale's
// argument). P * 2^15 split into halves keeps each p to 2^-21 relative
// (it is a normal half down to p = 2^-29) plus 2^-24 / 2^15 absolute, and
// the sum l is of the unsplit p: an output moves by 2^-21 of its scale
// and 2^-39 sum_e |v_e[d]| / l more (l >= 1 once the tiles are merged).
// The accumulations' own roundings are attentionTolerance's, as for
// attention_split (each key adds a high and a low product where
// attention_split adds one).
func (c *attentionCase) coopScale(scale []float64) []float64 {
	gamma := func(n int) float64 {
		u := math.Ldexp(1, -24)
		return float64(n) * u / (1 - float64(n)*u)
	}
	qd, kvd := c.nHead*c.hd, c.nKVHead*c.hd
	rel := gamma(c.hd) + gamma(2*c.hd+1)*(1+math.Ldexp(1, -10)) + math.Ldexp(1, -21)
	out := slices.Clone(scale)
	for i := range c.n {
		for h := range c.nHead {
			kvh := h / (c.nHead / c.nKVHead)
			var maxDelta float64
			vAbs := make([]float64, c.hd)
			for e, pos := range c.kPos {
				if pos > c.qPos[i] {
					continue
				}
				var qk, k float64
				for d := range c.hd {
					kd := math.Abs(float64(c.k[e*kvd+kvh*c.hd+d]))
					qk += math.Abs(float64(c.q[i*qd+h*c.hd+d])) * kd
					k += kd
					vAbs[d] += math.Abs(float64(c.v[e*kvd+kvh*c.hd+d]))
				}
				maxDelta = math.Max(maxDelta, (rel*qk+math.Ldexp(1, -24)*k)/math.Sqrt(float64(c.hd)))
			}
			widen := 1 + (math.Expm1(2*maxDelta)+math.Ldexp(1, -21))/attentionTolerance
			for d := range c.hd {
				j := i*qd + h*c.hd + d
				out[j] = out[j]*widen + math.Ldexp(1, -39)*vAbs[d]/attentionTolerance
			}
		}
	}
	return out
}

// TestAttentionCoopEmulated: attention_coop's emulated products (the
// staging, with zeros past a tile's end; the masking by position and
// count; the softmax's block step two lanes a row; the rescale of the
// accumulators by row; the partial results PSCALE undoes) against
// mod.Attend, at attentionTolerance widened by coopScale. Rows in ragged
// 16-row tiles and past a workgroup's 64; GQA; heads of 16 to 128; key
// tiles shorter than a staged block, not a multiple of it, the GPU's and
// the CPU's; a row that sees nothing (zeros); sharp softmaxes (scores to
// ~+-120); the count below the entries bound; Sorted 0 and 1.
func TestAttentionCoopEmulated(t *testing.T) {
	dev := openDevice(t)
	merge := newKernel(t, dev, lookup(t, "attention_merge"))
	cases := []splitCase{
		{1, 1, 1, 1, 16, 1, 1},
		{5, 5, 2, 1, 16, 1, 3}, // row 0 sees nothing (below)
		{7, 100, 6, 3, 32, 1, 7},
		{40, 300, 4, 2, 16, 8, 64},
		{9, 64, 3, 1, 16, 40, 33}, // scores up to ~+-120
		{33, 600, 5, 1, 64, 1, AttentionSplitLenGPU},
		{70, 700, 2, 2, 48, 1, AttentionSplitLen(48, true)}, // two workgroups of rows
		{130, 260, 2, 1, 64, 2, 100},
		{2, 5000, 2, 1, 128, 1, AttentionSplitLen(128, true)}, // many tiles of the largest head
		{17, 200, 2, 1, 128, 1, 200},
	}
	var stats errStats
	for i, tc := range cases {
		hd := uint32(tc.hd)
		require.True(t, AttentionCoopHeads(hd))
		require.LessOrEqual(t, AttentionCoopLoopIterations(hd, tc.splitLen), uint32(LavapipeLoopIterations), "case %d within lavapipe's loop cap", i)
		spec := AttentionCoopSpec(hd)
		name := AttentionCoopName(true)
		split := newKernel(t, dev, lookup(t, name), spec...)
		groups := func(n, nHead, splits uint32) [3]uint32 { return AttentionSplitGroupsOf(name, spec, n, nHead, splits) }
		c := tc.build(int64(100+i), i == 1)
		roundToHalf(t, c.k)
		roundToHalf(t, c.v)
		want, scale := c.reference()
		scale = c.coopScale(scale)
		for _, sorted := range []uint32{0, 1} {
			got := c.runSplit(t, dev, split, merge, tc.splitLen, true, true, sorted, groups)
			stats.add(got, want, scale)
			if err := closeness(got, want, scale, attentionTolerance); err != nil {
				t.Errorf("%s%v/%v/sorted%d: %v", name, spec, tc, sorted, err)
			}
		}
	}
	t.Logf("%s: %v (tolerance %g)", AttentionCoopName(true), stats, attentionTolerance)
}

// TestAttentionCoopPlan: the profile takes attention_coop only where asked
// and the tensor-core matmul runs, for an F16 generate-mode cache at a head
// it holds; its dispatch covers 64 rows a workgroup; its emulation's loops
// stay under lavapipe's cap at the CPU's and the GPU's key tiles.
func TestAttentionCoopPlan(t *testing.T) {
	gpu := Device{SubgroupSize: 32, SubgroupArithmetic: true, SubgroupShuffle: true, CooperativeMatrixNV: true, TensorCores: true,
		MaxWorkGroupInvocations: 1024, SharedMemory: 49152}
	for _, tc := range []struct {
		asked, coop bool
		kv          KV
		counts      bool
		hd          uint32
		want        bool
	}{
		{true, true, KVF16, true, 128, true},
		{true, true, KVF16, true, 64, true},
		{false, true, KVF16, true, 128, false}, // not asked
		{true, false, KVF16, true, 128, false}, // no tensor cores
		{true, true, KVF32, true, 128, false},  // an F32 cache
		{true, true, KVF32, false, 128, false}, // an eval window
		{true, true, KVF16, true, 256, false},  // a head past its registers
		{true, true, KVF16, true, 72, false},   // not whole tiles
	} {
		d := gpu
		d.AttentionCoop, d.CooperativeMatrixNV = tc.asked, tc.coop
		p := NewProfile(d)
		name, spec := p.AttentionSplit(tc.kv, tc.counts, tc.hd)
		require.Equal(t, tc.want, IsAttentionCoop(name), "%+v: %s", tc, name)
		if tc.want {
			require.Equal(t, AttentionCoopName(false), name)
			require.Equal(t, AttentionCoopSpec(tc.hd), spec)
			require.Contains(t, p.String(), "/attention-coop")
			fb, safe, ok := p.Fallback(lookup(t, name))
			require.True(t, ok)
			require.Equal(t, "attention_split", safe)
			fbName, _ := fb.AttentionSplit(tc.kv, tc.counts, tc.hd)
			require.False(t, IsAttentionCoop(fbName), "the fallback's kernel")
		}
	}
	// A device of 32 KiB of shared memory holds it at 64, not at 128.
	small := gpu
	small.AttentionCoop, small.SharedMemory = true, 32768
	for hd, want := range map[uint32]bool{64: true, 128: false} {
		name, _ := NewProfile(small).AttentionSplit(KVF16, true, hd)
		require.Equal(t, want, IsAttentionCoop(name), "32 KiB, hd %d", hd)
	}
	// Emulated under a profile whose tests emulate the tensor cores.
	d := gpu
	d.AttentionCoop = true
	p := NewProfile(d)
	p.MatmulCoopEmulate = true
	name, _ := p.AttentionSplit(KVF16, true, 64)
	require.Equal(t, AttentionCoopName(true), name)
	// 64 rows a workgroup (4 subgroups of 16), attention_split 32.
	spec := AttentionCoopSpec(64)
	require.Equal(t, [3]uint32{2 * 8 * 3, 1, 1}, AttentionSplitGroupsOf(name, spec, 65, 8, 3))
	require.Equal(t, AttentionSplitGroups(65, 8, 3), AttentionSplitGroupsOf(AttentionSplitName(KVF16, true), AttentionSplitSpec(64), 65, 8, 3))
	for _, hd := range []uint32{16, 64, 128} {
		for _, cpu := range []bool{true, false} {
			sl := AttentionSplitLen(hd, cpu)
			require.LessOrEqual(t, AttentionCoopLoopIterations(hd, sl), uint32(LavapipeLoopIterations), fmt.Sprintf("hd %d tile %d", hd, sl))
		}
	}
	// The shared memory it declares fits NVIDIA's 48 KiB at 128, lavapipe's
	// 32 KiB emulated.
	for _, emu := range []bool{false, true} {
		nd, err := lookup(t, AttentionCoopName(emu)).Needs(AttentionCoopSpec(128))
		require.NoError(t, err)
		limit := uint32(49152)
		if emu {
			limit = 32768
		}
		require.LessOrEqual(t, nd.SharedBytes, limit, "emulated %v", emu)
		require.Equal(t, uint32(128), nd.Invocations)
		t.Logf("%s at hd 128: %d bytes of shared memory", AttentionCoopName(emu), nd.SharedBytes)
	}
}
