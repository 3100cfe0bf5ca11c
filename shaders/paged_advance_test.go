package shaders

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
)

// TestPagedAdvance: paged_advance adds to each row's routed tables'
// lengths in rmeta the rows each routed layer took (a nonzero selected
// word of the trace, [nRouted][3][stride]), and leaves the tables'
// offsets, the lengths of rows that were not taken, and the rows past n
// as they were: rows across workgroups (1, 5, 64, 65, 130), 1 to 3 routed
// layers, a trace stride above n, selected words other than 1.
func TestPagedAdvance(t *testing.T) {
	dev := openDevice(t)
	k := newKernel(t, dev, lookup(t, "paged_advance"))
	rng := rand.New(rand.NewSource(5))
	for _, n := range []int{1, 5, 64, 65, 130} {
		for nr := 1; nr <= 3; nr++ {
			t.Run(fmt.Sprintf("n%d/routed%d", n, nr), func(t *testing.T) {
				stride, rows := n+rng.Intn(9), n+3 // rows past n in rmeta, left alone
				trace := make([]uint32, 3*nr*stride)
				for i := range trace {
					trace[i] = rng.Uint32() // scores' bits, and selections
				}
				rmeta := make([]uint32, 2*rows*nr)
				for i := range rmeta {
					rmeta[i] = uint32(rng.Intn(1000))
				}
				want := append([]uint32(nil), rmeta...)
				for i := range n {
					for j := range nr {
						sel := &trace[(3*j+2)*stride+i]
						switch rng.Intn(3) {
						case 0:
							*sel = 0
						case 1:
							*sel = 1
						}
						if *sel != 0 {
							want[2*(i*nr+j)+1]++
						}
					}
				}
				tb, mb := newBuffer(t, dev, u32bytes(trace)), newBuffer(t, dev, u32bytes(rmeta))
				rec := dev.NewRecorder()
				defer rec.Close()
				rec.Dispatch(k, vk.MustPackPush(PagedPush{N: uint32(n), NRouted: uint32(nr), Stride: uint32(stride)}), Groups(uint32((n+63)/64)),
					denseBind(tb, vk.Read), denseBind(mb, vk.ReadWrite))
				if err := dev.Run(rec); err != nil {
					t.Fatal(err)
				}
				assert.Equal(t, want, downloadU32(t, mb, len(rmeta)))
			})
		}
	}
}
