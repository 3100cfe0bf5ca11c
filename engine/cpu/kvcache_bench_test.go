package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkKVAttend times one decoded row's attention on one thread (every
// head's scores, softmax and mix) over m cached entries of a layer with
// 8 KV heads of 64 (kvDim 512, the solo runner's layout), with an F32
// cache, an F16 one read by the fused F16C kernels and (f16-widen, where
// those exist) an F16 one widened a block at a time for the float kernels.
// Layers rotate so that the caches together pass 64 MiB at F32 (past L2,
// as decode at a long context is), and each F16 run is checked against
// the float kernels over its widened cache before it is timed. It reports
// the cache's bytes read per second (half at F16).
func BenchmarkKVAttend(b *testing.B) {
	const nHead, hd = 8, 64
	const kvd = nHead * hd
	for _, m := range []int{1024, 4096} {
		layers := max(1, (64<<20)/(m*kvd*4*2))
		rng := rand.New(rand.NewPCG(1, 2))
		x := make([]float32, m*kvd)
		q := make([]float32, nHead*hd)
		for i := range q {
			q[i] = float32(rng.NormFloat64())
		}
		caches := map[bool][][2]kvRows{}
		for _, half := range []bool{false, true} {
			for range layers {
				var kv [2]kvRows
				for j := range kv {
					for i := range x {
						x[i] = float32(rng.NormFloat64())
					}
					kv[j] = kvRows{half: half}
					kv[j].append(x)
				}
				caches[half] = append(caches[half], kv)
			}
		}
		attend := func(out []float32, kv [2]kvRows, sc, buf, part []float32) {
			for h := range nHead {
				kv[0].scores(sc, q[h*hd:(h+1)*hd], h*hd, kvd, 0.125, buf)
				softmax(sc)
				kv[1].mix(out[h*hd:(h+1)*hd], h*hd, kvd, sc, buf, part)
			}
		}
		sc, buf, part := make([]float32, m), make([]float32, kvBlock*hd), make([]float32, hd)
		for _, v := range []struct {
			name       string
			half, fuse bool
		}{{KVF32, false, true}, {KVF16, true, true}, {KVF16 + "-widen", true, false}} {
			b.Run(fmt.Sprintf("m%d/%s", m, v.name), func(b *testing.B) {
				fuseF16 = v.fuse
				defer func() { fuseF16 = true }()
				if v.half { // validate against the float kernels over the halves widened
					var wide [2]kvRows
					for j := range wide {
						wide[j] = kvRows{f: caches[true][0][j].floats()}
					}
					got, want := make([]float32, kvd), make([]float32, kvd)
					attend(got, caches[true][0], sc, buf, part)
					attend(want, wide, sc, buf, part)
					if d := relDiff(got, want); d > 1e-5 {
						b.Fatalf("F16 attention off the widened F32's by %g", d)
					}
				}
				out := make([]float32, kvd)
				b.SetBytes(int64(2 * m * kvd * kvElemBytes(v.half)))
				b.ResetTimer()
				for i := range b.N {
					attend(out, caches[v.half][i%layers], sc, buf, part)
				}
			})
		}
	}
}
