package shaders

import (
	"encoding/binary"
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
