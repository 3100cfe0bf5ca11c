package shaders

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/modrun/modrun/gguf"
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

// BenchmarkMatvecVectors times matvec over several vectors at once, as the
// Vulkan step runner's steps of up to 8 rows run their products
// (engine/vulkan/stepvec.go: NB = the rows), on stories15M-shape Q8_0
// matrices (the q|k|v stack, the FFN's gate|up and down, the head), and
// reports the time per vector: at n 8 it should be well under n 1's when
// each weight is loaded and dequantized once for all the vectors.
func BenchmarkMatvecVectors(b *testing.B) {
	dev := openDeviceWith(b, vk.InstanceOptions{})
	prof := NewProfile(deviceOf(dev))
	for _, shape := range [][2]int{{864, 288}, {1536, 288}, {288, 768}, {32000, 288}} {
		rows, cols := shape[0], shape[1]
		for _, n := range []int{1, 8} {
			for _, lanes := range []bool{false, true} {
				p := prof
				p.MatvecLanes = lanes
				if lanes && !prof.MatvecLanes {
					continue
				}
				name, spec := p.Matvec(matvecTypeOf[gguf.TypeQ8_0], FuseNone, uint32(n), uint32(cols))
				benchMatvecVectors(b, dev, p, name, spec, rows, cols, n)
			}
		}
	}
}

// benchMatvecVectors is one of BenchmarkMatvecVectors's kernels (name,
// spec: NB set to n) over a Q8_0 matrix of rows x cols and n vectors.
func benchMatvecVectors(b *testing.B, dev *vk.Device, p Profile, name string, spec []uint32, rows, cols, n int) {
	spec = append([]uint32(nil), spec...)
	if len(spec) > 2 {
		spec[2] = uint32(n)
	}
	benchMatvecVectorsSpec(b, dev, p, name, spec, rows, cols, n)
}

func benchMatvecVectorsSpec(b *testing.B, dev *vk.Device, p Profile, name string, spec []uint32, rows, cols, n int) {
	b.Run(fmt.Sprintf("q8_0/%dx%d/n%d/%s%v", rows, cols, n, name, spec), func(b *testing.B) {
		v, err := Lookup(name)
		require.NoError(b, err)
		k := newKernel(b, dev, v, spec...)
		c, err := newMatvecCase(gguf.TypeQ8_0, rows, cols, n, 1)
		require.NoError(b, err)
		if err := closeness(c.run(b, dev, k), c.want, c.scale, matvecTolerance[gguf.TypeQ8_0]); err != nil {
			b.Fatalf("wrong before timing: %v", err)
		}
		wb, xb := newBuffer(b, dev, c.gpu), newBuffer(b, dev, f32bytes(c.x))
		yb, err := dev.NewBuffer(uint64(4*rows*n), vk.DeviceLocal)
		require.NoError(b, err)
		defer yb.Close()
		rec := dev.NewRecorder()
		defer rec.Close()
		rec.Dispatch(k, vk.MustPackPush(MatvecPush{Rows: uint32(rows), Cols: uint32(cols), N: uint32(n)}), MatvecGroups(uint32(rows), spec),
			vk.Bind{Buf: wb, Access: vk.Read}, vk.Bind{Buf: xb, Access: vk.Read}, vk.Bind{Buf: yb, Access: vk.Write})
		require.NoError(b, dev.Run(rec))
		b.ResetTimer()
		cpu0 := cpuTime()
		for i := 0; i < b.N; i++ {
			if err := dev.Run(rec); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N*n)*1e6, "us/vector")
		b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N*n)*1e6, "cpu-us/vector")
	})
}

// cpuTime is the CPU time this process has used, its threads together
// (lavapipe's workers among them): on a loaded machine a kernel's CPU
// time varies less than its wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
