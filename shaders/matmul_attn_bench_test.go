package shaders

import (
	"fmt"
	"testing"
	"time"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/require"
)

// secondsPerRun replays rec until at least 3 runs and 200 ms have passed: the
// baseline a benchmark reports its ratio against, timed in the same process.
func secondsPerRun(b *testing.B, dev *vk.Device, rec *vk.Recorder) float64 {
	b.Helper()
	require.NoError(b, dev.Run(rec)) // records
	start, runs := time.Now(), 0
	for runs < 3 || time.Since(start) < 200*time.Millisecond {
		require.NoError(b, dev.Run(rec))
		runs++
	}
	return time.Since(start).Seconds() / float64(runs)
}

// BenchmarkMatmul times matmul on a prefill-sized problem (128 tokens through
// a 1024x1024 weight) and reports GFLOP/s, and its speed against matvec doing
// the same product a token at a time (lavapipe's matvec spec, one dispatch), timed
// in the same run. Both are checked against the reference first.
func BenchmarkMatmul(b *testing.B) {
	dev := openDeviceWith(b, vk.InstanceOptions{})
	const rows, cols, n = 1024, 1024, 128
	flops := 2.0 * rows * cols * n
	for _, typ := range matmulTypes {
		c := newMatmulCase(b, typ, rows, cols, n, 1)
		wb, xb := newBuffer(b, dev, matmulLayout(b, typ, c.w, rows, cols)), newBuffer(b, dev, f32bytes(c.x))
		yb, err := dev.NewBuffer(4*rows*n, vk.DeviceLocal)
		require.NoError(b, err)
		b.Cleanup(yb.Close)
		binds := []vk.Bind{{Buf: wb, Access: vk.Read}, {Buf: xb, Access: vk.Read}, {Buf: yb, Access: vk.Write}}

		// The baseline: matvec, each weight row read once per token.
		mvName, mvSpec := lavapipeProfile.Matvec(matvecTypeOf[typ], FuseNone, 1, cols)
		mv, err := Lookup(mvName)
		require.NoError(b, err)
		mk := newKernel(b, dev, mv, mvSpec...)
		mvw, err := MatvecBytes(matvecTypeOf[typ], c.w, rows, cols)
		require.NoError(b, err)
		mwb := newBuffer(b, dev, mvw)
		mrec := dev.NewRecorder()
		b.Cleanup(mrec.Close)
		// In dispatches of 32 tokens: lavapipe ends every loop of an
		// invocation after 65535 iterations in all (llvmpipe's loop
		// limiter), and matvec's invocation loops over n*cols/NB weights.
		const chunk = 32
		for s := 0; s < n; s += chunk {
			mrec.Dispatch(mk, vk.MustPackPush(MatvecPush{Rows: rows, Cols: cols, N: chunk}), MatvecGroups(rows, mvSpec),
				vk.Bind{Buf: mwb, Access: vk.Read},
				vk.Bind{Buf: xb, Offset: uint64(4 * s * cols), Size: 4 * chunk * cols, Access: vk.Read},
				vk.Bind{Buf: yb, Offset: uint64(4 * s * rows), Size: 4 * chunk * rows, Access: vk.Write})
		}
		matvecSeconds := secondsPerRun(b, dev, mrec)
		if err := closeness(download(b, yb, n*rows), c.want, c.scale, matvecTolerance[typ]); err != nil {
			b.Fatalf("matvec wrong before timing: %v", err)
		}

		specs := []struct {
			name string
			spec MatmulSpec
		}{{"gpu-spec", MatmulSpecGPU}, {"cpu-spec", MatmulSpecCPU}}
		for _, sp := range specs {
			b.Run(fmt.Sprintf("%s/%dx%d/n%d/%s", typ, rows, cols, n, sp.name), func(b *testing.B) {
				v, err := Lookup(matmulVariantOf(typ))
				require.NoError(b, err)
				k := newKernel(b, dev, v, sp.spec.Constants()...)
				if err := closeness(c.run(b, dev, k, sp.spec), c.want, c.scale, matmulTolerance[typ]); err != nil {
					b.Fatalf("wrong before timing: %v", err)
				}
				rec := dev.NewRecorder()
				defer rec.Close()
				rec.Dispatch(k, vk.MustPackPush(matmulWhole(rows, cols, n)), MatmulGroups(rows, n, sp.spec), binds...)
				require.NoError(b, dev.Run(rec)) // records
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := dev.Run(rec); err != nil {
						b.Fatal(err)
					}
				}
				seconds := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(flops/seconds/1e9, "GFLOP/s")
				b.ReportMetric(flops/matvecSeconds/1e9, "matvec-GFLOP/s")
				b.ReportMetric(matvecSeconds/seconds, "x-matvec")
			})
		}
	}
}

// BenchmarkAttention times attention_split and attention_merge for a decode
// step over a 512-entry cache and a 128-token prefill (8 query heads, 4 kv
// heads of 64), in the CPU device's key tiles, reports microseconds per
// attention, and its speed against mod.Attend on the CPU (all cores), timed
// in the same run. It checks the result first.
func BenchmarkAttention(b *testing.B) {
	dev := openDeviceWith(b, vk.InstanceOptions{})
	const nHead, nKVHead, hd = 8, 4, 64
	split := newKernel(b, dev, lookup(b, "attention_split"), AttentionSplitSpec(hd)...)
	merge := newKernel(b, dev, lookup(b, "attention_merge"))
	for _, sh := range []struct{ n, entries int }{{1, 512}, {128, 128}} {
		b.Run(fmt.Sprintf("n%d/entries%d/heads%d:%d/hd%d", sh.n, sh.entries, nHead, nKVHead, hd), func(b *testing.B) {
			c := newAttentionCase(sh.n, sh.entries, nHead, nKVHead, hd, 1, 1)
			want, scale := c.reference()
			rec, out := c.splitRecorder(b, dev, split, merge, AttentionSplitLen(hd, true), false, false, 1, nil)
			require.NoError(b, dev.Run(rec))
			if err := closeness(download(b, out, sh.n*nHead*hd), want, scale, attentionTolerance); err != nil {
				b.Fatalf("wrong before timing: %v", err)
			}
			cpuOut := make([]float32, sh.n*nHead*hd)
			start, runs := time.Now(), 0
			for runs < 3 || time.Since(start) < 200*time.Millisecond {
				mod.Attend(cpuOut, c.q, c.k, c.v, sh.entries-sh.n, sh.n, nHead, nKVHead, hd)
				runs++
			}
			cpuSeconds := time.Since(start).Seconds() / float64(runs)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := dev.Run(rec); err != nil {
					b.Fatal(err)
				}
			}
			seconds := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(seconds*1e6, "us/attention")
			b.ReportMetric(cpuSeconds*1e6, "cpu-us")
			b.ReportMetric(cpuSeconds/seconds, "x-cpu")
		})
	}
}

// matmulWhole is the push of a matmul of all rows of a matrix bound whole
// into y [n][rows].
func matmulWhole(rows, cols, n uint32) MatmulPush {
	return MatmulPush{Rows: rows, Cols: cols, N: n, WRows: rows, LdY: rows}
}
