package shaders

import (
	"fmt"
	"testing"

	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/require"
)

// BenchmarkMatvec times matvec on decode-sized problems (one vector: a
// TinyLlama-shape square and FFN matrix, rows x cols) and reports the weight
// bytes read per second, for each weight type and each profile's choice on
// this device: its own, and a GPU's with and without subgroup arithmetic
// forced onto it. It checks the result against the reference first. Each
// Run replays perRun dispatches over the same weights into separate outputs,
// so the submit cost is spread over them (a real decode step runs dozens of
// kernels per submit).
func BenchmarkMatvec(b *testing.B) {
	dev := openDeviceWith(b, vk.InstanceOptions{})
	d := deviceOf(dev)
	profiles := []struct {
		name string
		p    Profile
	}{{"own", NewProfile(d)}, {"gpu-subgroup", gpuProfileOn(d, true)}, {"gpu-shared", gpuProfileOn(d, false)}}
	const perRun = 8
	for _, typ := range matvecWeightTypes {
		for _, shape := range [][2]int{{2048, 2048}, {5632, 2048}} {
			rows, cols := shape[0], shape[1]
			for _, pr := range profiles {
				b.Run(fmt.Sprintf("%s/%dx%d/%s", typ, rows, cols, pr.name), func(b *testing.B) {
					name, spec := pr.p.Matvec(matvecTypeOf[typ], FuseNone, 1, uint32(cols))
					v, err := Lookup(name)
					require.NoError(b, err)
					k := newKernel(b, dev, v, spec...)
					c, err := newMatvecCase(typ, rows, cols, 1, 1)
					require.NoError(b, err)
					if err := closeness(c.run(b, dev, k), c.want, c.scale, matvecTolerance[typ]); err != nil {
						b.Fatalf("wrong before timing: %v", err)
					}
					wb, xb := newBuffer(b, dev, c.gpu), newBuffer(b, dev, f32bytes(c.x))
					yb, err := dev.NewBuffer(uint64(4*rows*perRun), vk.DeviceLocal)
					require.NoError(b, err)
					defer yb.Close()
					rec := dev.NewRecorder()
					defer rec.Close()
					push := vk.MustPackPush(MatvecPush{Rows: uint32(rows), Cols: uint32(cols), N: 1})
					for i := 0; i < perRun; i++ {
						rec.Dispatch(k, push, MatvecGroups(uint32(rows), spec), vk.Bind{Buf: wb, Access: vk.Read},
							vk.Bind{Buf: xb, Access: vk.Read}, vk.Bind{Buf: yb, Offset: uint64(4 * rows * i), Size: uint64(4 * rows), Access: vk.Write})
					}
					require.NoError(b, dev.Run(rec)) // records
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if err := dev.Run(rec); err != nil {
							b.Fatal(err)
						}
					}
					perMatvec := b.Elapsed().Seconds() / float64(b.N*perRun)
					b.ReportMetric(float64(len(c.w))/perMatvec/1e9, "GB/s")
					b.ReportMetric(perMatvec*1e6, "us/matvec")
				})
			}
		}
	}
}
