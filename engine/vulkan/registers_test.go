package vulkan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
	"github.com/modrun/modrun/vk/vktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spills is k's spilled registers as its driver counts them (RADV: vector
// and scalar), and its statistics for the log.
func spills(t *testing.T, k *kernel) (float64, string) {
	t.Helper()
	stats, err := k.k.Statistics()
	require.NoError(t, err)
	var n float64
	var seen bool
	var parts []string
	for _, s := range stats {
		switch s.Name {
		case "Spilled VGPRs", "Spilled SGPRs":
			n += s.Value
			seen = true
		}
		switch s.Name {
		case "VGPRs", "Spilled VGPRs", "Subgroups per SIMD", "Instructions":
			parts = append(parts, fmt.Sprintf("%s %g", s.Name, s.Value))
		}
	}
	require.True(t, seen, "%s: the driver reports no spills: %v", k.v.Name, stats)
	return n, strings.Join(parts, ", ")
}

// TestMatvecRegistersRDNA3: every matvec the profile modrun takes on an
// RDNA3 GPU picks, the decode step's (one vector) and a batched step's (2
// to 16 vectors a pass, Profile.MatvecBatch), for every weight type and
// fusion, compiles without a spilled register with AMD's compiler (RADV's
// null gfx1100 device: no GPU needed). The NVIDIA profile's choice there
// (4 rows a subgroup, 8 and 16 vectors: what batched steps ran before)
// spills under SwiGLU: the test of the statistics' sense.
func TestMatvecRegistersRDNA3(t *testing.T) {
	if !vktest.OnNullRADV(t, "gfx1100") {
		return
	}
	dev := vktest.Open(t, vk.InstanceOptions{KernelStatistics: true})
	prof := DeviceProfile(dev.Info())
	require.True(t, prof.MatvecRows, "the profile on RDNA3: %s", prof)
	t.Logf("profile: %s", prof)
	ks := newKernels(dev, &prof, nil)
	defer ks.Close()
	for _, typ := range shaders.MatvecTypes {
		for _, fuse := range shaders.MatvecFusions {
			for _, nb := range []uint32{1, 2, 4, 8, 16} {
				name, spec := prof.MatvecBatch(typ, fuse, nb, 16, 4096)
				k, err := ks.get(name, spec)
				require.NoError(t, err)
				n, log := spills(t, k)
				t.Logf("%s%v: %s", name, k.spec, log)
				assert.Zero(t, n, "%s%v spills", name, k.spec)
			}
		}
	}
	for _, nb := range []uint32{8, 16} {
		name := shaders.MatvecFusedName(shaders.MatvecQ8_0, shaders.ReduceSubgroupRows, shaders.FuseNormSwiGLU)
		k, err := ks.get(name, []uint32{4 * prof.SubgroupSize, prof.SubgroupSize, nb, 4})
		require.NoError(t, err)
		n, log := spills(t, k)
		t.Logf("before: %s%v: %s", name, k.spec, log)
		assert.Positive(t, n, "%s%v: the decode kernel at %d vectors", name, k.spec, nb)
	}
}

// TestAttentionRegistersRDNA3: the prefill's attention the RDNA3 profile
// picks (Profile.AttentionSplit: lanes a query row) compiles without a
// spilled register with AMD's compiler at head dimensions 64 and 128, for
// every cache it reads; one invocation a row, the kernel before, spills
// at both (it holds 2*hd floats of query and output).
func TestAttentionRegistersRDNA3(t *testing.T) {
	if !vktest.OnNullRADV(t, "gfx1100") {
		return
	}
	dev := vktest.Open(t, vk.InstanceOptions{KernelStatistics: true})
	prof := DeviceProfile(dev.Info())
	ks := newKernels(dev, &prof, nil)
	defer ks.Close()
	for _, hd := range []uint32{64, 128} {
		for _, c := range []struct {
			kv     shaders.KV
			counts bool
		}{{shaders.KVF32, false}, {shaders.KVF32, true}, {shaders.KVF16, true}} {
			name, spec := prof.AttentionSplit(c.kv, c.counts, hd)
			require.Equal(t, shaders.AttentionSplitLanesName(c.kv, c.counts), name, "the RDNA3 profile takes lanes a row")
			k, err := ks.get(name, spec)
			require.NoError(t, err)
			n, log := spills(t, k)
			t.Logf("%s%v: %s", name, k.spec, log)
			assert.Zero(t, n, "%s%v spills", name, k.spec)

			before, err := ks.get(shaders.AttentionSplitName(c.kv, c.counts), shaders.AttentionSplitSpec(hd))
			require.NoError(t, err)
			n, log = spills(t, before)
			t.Logf("before: %s%v: %s", before.v.Name, before.spec, log)
			assert.Positive(t, n, "%s%v: one invocation a row", before.v.Name, before.spec)
		}
	}
}

// TestMatvecDotRegistersRDNA3: matvec_dot (MODRUN_MATVEC_DOT=1), every
// quantized type and fusion, at a 4,096- and an 11,008-column row (11,264
// for the K-quants' blocks of 256) and a batched step's 8 and 16 vectors
// a pass of 4,096, compiles with AMD's
// compiler (RADV's null gfx1100 device, which has integer dot products:
// v_dot4_i32_iu8) without a spilled register; the log says its registers.
func TestMatvecDotRegistersRDNA3(t *testing.T) {
	if !vktest.OnNullRADV(t, "gfx1100") {
		return
	}
	dev := vktest.Open(t, vk.InstanceOptions{KernelStatistics: true})
	require.True(t, dev.Info().Features.IntegerDotProduct, "RADV on gfx1100 has integer dot products")
	prof, err := ProfileWith(dev.Info(), Knobs{"MODRUN_MATVEC_DOT": "1"})
	require.NoError(t, err)
	require.True(t, prof.MatvecDot, "the profile on RDNA3 with MODRUN_MATVEC_DOT=1: %s", prof)
	ks := newKernels(dev, &prof, nil)
	defer ks.Close()
	for _, typ := range shaders.MatvecDotTypes {
		for _, fuse := range shaders.MatvecFusions {
			for _, c := range []struct{ n, cols uint32 }{{1, 4096}, {1, 11008}, {8, 4096}, {16, 4096}} {
				cols := c.cols
				if shaders.MatvecDotBlock(typ) == 256 {
					cols = (cols + 255) / 256 * 256
				}
				name, spec := prof.MatvecBatch(typ, fuse, c.n, c.n, cols)
				require.Contains(t, name, shaders.ReduceSubgroupDot)
				k, err := ks.get(name, spec)
				require.NoError(t, err)
				n, log := spills(t, k)
				t.Logf("%s%v: %s", name, k.spec, log)
				assert.Zero(t, n, "%s%v spills", name, k.spec)
			}
		}
	}
}
