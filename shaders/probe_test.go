package shaders

import (
	"encoding/binary"
	"math"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/vk"
)

// probePattern is what probe_fill writes at element i.
func probePattern(i uint32) [4]uint32 {
	h := i * 0x9E3779B1
	return [4]uint32{h, h ^ 0x85EBCA6B, h * 0xC2B2AE35, ^h}
}

// probe_fill writes its pattern over every element (ragged counts, several
// groups, a grid-stride tail), and probe_read folds what it reads: with
// one element per invocation, invocation j's fold is element j's, so it
// stores the magic exactly when the magic is that fold.
func TestProbeFillsAndReads(t *testing.T) {
	dev := openDevice(t)
	fillV, err := Lookup("probe_fill")
	require.NoError(t, err)
	readV, err := Lookup("probe_read")
	require.NoError(t, err)
	fill, read := newKernel(t, dev, fillV), newKernel(t, dev, readV)
	for _, n := range []uint32{1, 7, 256, 1000, 256*ProbeIterations + 3} {
		buf := newBuffer(t, dev, make([]byte, 16*n))
		rec := dev.NewRecorder()
		rec.Dispatch(fill, vk.MustPackPush(ProbePush{N: n}), ProbeGroups(n), vk.Bind{Buf: buf, Access: vk.Write})
		require.NoError(t, dev.Run(rec))
		rec.Close()
		got := make([]byte, 16*n)
		require.NoError(t, buf.Download(got, 0))
		for i := uint32(0); i < n; i++ {
			p := probePattern(i)
			for c := 0; c < 4; c++ {
				require.Equal(t, p[c], binary.LittleEndian.Uint32(got[16*i+4*uint32(c):]), "n=%d element %d component %d", n, i, c)
			}
		}
	}
	const n = 200 // one group of 256 invocations: invocation j reads element j alone
	buf := newBuffer(t, dev, make([]byte, 16*n))
	rec := dev.NewRecorder()
	rec.Dispatch(fill, vk.MustPackPush(ProbePush{N: n}), ProbeGroups(n), vk.Bind{Buf: buf, Access: vk.Write})
	require.NoError(t, dev.Run(rec))
	rec.Close()
	p := probePattern(123)
	fold := p[0] ^ p[1] ^ p[2] ^ p[3]
	for magic, written := range map[uint32]bool{fold: true, fold + 1: false} {
		sink := newBuffer(t, dev, []byte{0xEE, 0xEE, 0xEE, 0xEE})
		rec := dev.NewRecorder()
		rec.Dispatch(read, vk.MustPackPush(ProbePush{N: n, Magic: magic}), ProbeGroups(n),
			vk.Bind{Buf: buf, Access: vk.Read}, vk.Bind{Buf: sink, Access: vk.Write})
		require.NoError(t, dev.Run(rec))
		rec.Close()
		got := make([]byte, 4)
		require.NoError(t, sink.Download(got, 0))
		if written {
			assert.Equal(t, magic, binary.LittleEndian.Uint32(got), "the fold of element 123 is stored")
		} else {
			assert.Equal(t, uint32(0xEEEEEEEE), binary.LittleEndian.Uint32(got), "no fold matches: nothing stored")
		}
	}
}

// shaderConst is the value of `const uint NAME = Vu;` in a .comp source.
func shaderConst(t *testing.T, source, name string) int {
	t.Helper()
	src, err := os.ReadFile(source)
	require.NoError(t, err)
	m := regexp.MustCompile(`const uint ` + name + ` = (\d+)u;`).FindSubmatch(src)
	require.NotNil(t, m, "%s declares no const uint %s", source, name)
	v, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	return v
}

// The compute probes' FLOP formulas count the loops their shaders run: the
// constants are the shaders' own, and probe_fma with a = b = 1 ends every
// chain at an exact count of its steps, so a dispatch that ran fewer (or
// more) steps than ProbeFMAFLOPs counts writes another sum. probe_coop
// needs tensor cores (not on lavapipe): its constants are checked here, its
// result by vulkan.ProbeCompute on the device.
func TestProbeFMACounts(t *testing.T) {
	assert.Equal(t, ProbeFMAChains, shaderConst(t, "probe_fma.comp", "CHAINS"))
	assert.Equal(t, ProbeFMAUnroll, shaderConst(t, "probe_fma.comp", "UNROLL"))
	assert.Equal(t, ProbeCoopAccumulators, shaderConst(t, "probe_coop.comp", "ACCS"))
	assert.Equal(t, ProbeCoopUnroll, shaderConst(t, "probe_coop.comp", "UNROLL"))
	v, err := Lookup("probe_coop")
	require.NoError(t, err)
	assert.Equal(t, uint32(32*ProbeCoopSubgroups), v.LocalSize[0])
	// By hand: 3 groups of 256 invocations, 8 chains of 8 steps a trip, 5 trips, 2 FLOPs a step.
	assert.Equal(t, uint64(3*256*8*8*5*2), ProbeFMAFLOPs(3, 5))
	assert.Equal(t, uint64(3*4*8*2*5*8192), ProbeCoopFLOPs(3, 5))
	assert.Equal(t, float32(0+1+2+3+4+5+6+7+8*8*5), ProbeFMAResult(5))

	dev := openDevice(t)
	fmaV, err := Lookup("probe_fma")
	require.NoError(t, err)
	k := newKernel(t, dev, fmaV)
	for _, c := range []struct{ groups, iterations uint32 }{{1, 0}, {3, 5}, {2, 1000}} {
		n := c.groups * ProbeFMALocalSize
		out := newBuffer(t, dev, make([]byte, 4*n))
		rec := dev.NewRecorder()
		rec.Dispatch(k, vk.MustPackPush(ProbeFlopsPush{Iterations: c.iterations, A: 1, B: 1}), [3]uint32{c.groups, 1, 1},
			vk.Bind{Buf: out, Access: vk.Write})
		require.NoError(t, dev.Run(rec))
		rec.Close()
		got := make([]byte, 4*n)
		require.NoError(t, out.Download(got, 0))
		want := ProbeFMAResult(c.iterations)
		for i := uint32(0); i < n; i++ {
			require.Equal(t, want, math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])), "%d groups, %d iterations: invocation %d", c.groups, c.iterations, i)
		}
	}
}
