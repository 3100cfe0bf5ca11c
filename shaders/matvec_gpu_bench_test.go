package shaders

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/require"
)

// BenchmarkMatvecGPU times every matvec candidate on decode-shaped products
// (issue 42; docs/matvec-cost.md has the bound each should reach) and
// reports the weight bytes read per second, as GB/s and as a share of the
// device's streaming rate measured by the probe kernel in the same run
// (%probe). On a GPU the shapes are a 7B's and a 1.1B's fused decode
// products (q|k|v with the norm, gate+up with SwiGLU, down with the add);
// on a CPU device (lavapipe) tiny ones, so that the benchmark's code and
// every candidate's validation run in seconds there. Each case runs NB =
// 1, 8, 16 vectors in one pass, for:
//   - own: what NewProfile picks on this device (the engine's choice: at
//     NB > 1 a batched step's, Profile.MatvecBatch);
//   - decode (NB > 1): the decode step's kernel with NB vectors, what
//     batched steps ran before MatvecBatch;
//   - sg (NB 1): matvec.comp with a subgroup per row (a GPU profile's
//     choice before matvec_rows; F16's still);
//   - rows-r4: matvec_rows.comp with 4 rows a subgroup (the quantized
//     types' decode kernel);
//   - words-rN (F16, Q8_0, Q4_1, Q4_K): matvec_words.comp, lanes reading
//     the rows in interleaved units of 8 weights (matvecCandidates), 4
//     units in flight; words-rN-uU (NB 8 and 16) with U of them;
//   - words-r4-fixed (NB 1): the same with NB and the rows a subgroup
//     compiled in, not specialization constants: whether the driver keeps
//     arrays sized by those in memory;
//   - with integer dot products, matvec_dot: dot-rN, dot-r4-u1,
//     dot-r4-wg8 and dot-r4-pre (NB 1, the decode's; -pre: x quantized
//     by dot_x, timed with it); dot and dot-w4 (NB > 1, each
//     workgroup quantizing the NB vectors), and dot-pre (NB > 1, x
//     quantized once by dot_x, timed with it: MODRUN_MATVEC_DOT=1's
//     batched path).
//
// Before timing, each kernel's output is checked against a float64
// reference on a sample of rows (every 61st and the last), with matvec's
// tolerances. The weights are random quantized blocks (not quantized
// floats: the 7B's 90M-weight K-quant matrices would take minutes to
// quantize in Go) with sane scales, dequantized by gguf for the
// reference. Timing cycles over copies of the weights that together pass
// 256 MiB, so that a matrix smaller than the L2 cache (an H200's is 50 MB)
// is still read from memory; with timestamps the GPU's clock times the
// dispatches.
//
// Run from the compiled test binary on a GPU machine:
//
//	shaders.test -test.run '^$' -test.bench BenchmarkMatvecGPU -test.benchtime 200x
func BenchmarkMatvecGPU(b *testing.B) {
	dev := openDeviceWith(b, vk.InstanceOptions{})
	d := deviceOf(dev)
	if !d.SubgroupArithmetic || d.SubgroupSize == 0 {
		b.Skip("the GPU candidates need subgroup arithmetic and a known subgroup size")
	}
	probe := probeGBps(b, dev)
	b.Logf("device %s, subgroups of %d, probe %.0f GB/s", dev.Info().Name, d.SubgroupSize, probe)
	shapes, types := matvecGPUShapes, []gguf.TensorType{gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ4_0, gguf.TypeQ6_K}
	if d.CPU {
		shapes, types = matvecCPUShapes, []gguf.TensorType{gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_K}
	}
	for _, sh := range shapes {
		for _, typ := range types {
			b.Run(fmt.Sprintf("%s/%s", sh.name, typ), func(b *testing.B) {
				mc := newMatvecGPUCase(b, typ, sh, 16)
				defer mc.closeKernels()
				for _, nb := range []int{1, 8, 16} {
					for _, cand := range matvecCandidates(d, matvecTypeOf[typ], sh.fuse, nb, sh.cols) {
						b.Run(fmt.Sprintf("nb%d/%s%v", nb, cand.label, cand.spec), func(b *testing.B) {
							mc.bench(b, dev, cand, nb, probe)
						})
					}
				}
			})
		}
	}
}

// matvecGPUShape is one decode product: rows outputs (gate+up: 2*rows rows
// of weights) of cols columns, with its fusion.
type matvecGPUShape struct {
	name       string
	rows, cols int
	fuse       string
}

var matvecGPUShapes = []matvecGPUShape{
	{"7b-qkv-norm", 3 * 4096, 4096, FuseNorm},
	{"7b-gateup-swiglu", 11008, 4096, FuseNormSwiGLU},
	{"7b-down-add", 4096, 11008, FuseAdd},
	{"1b-qkv-norm", 2048 + 2*256, 2048, FuseNorm},
	{"1b-gateup-swiglu", 5632, 2048, FuseNormSwiGLU},
	{"1b-down-add", 2048, 5632, FuseAdd},
}

var matvecCPUShapes = []matvecGPUShape{
	{"tiny-gateup-swiglu", 40, 512, FuseNormSwiGLU},
	{"tiny-down-add", 72, 768, FuseAdd},
}

// matvecCandidate is a kernel to time: a variant and its spec (NB set).
type matvecCandidate struct {
	label, name string
	spec        []uint32
}

// matvecCandidates are the kernels BenchmarkMatvecGPU times for weight type
// typ, fusion fuse and nb vectors on device d: the profile's own (at nb > 1
// a batched step's, Profile.MatvecBatch, with the decode step's kernel at
// nb beside it as "decode", what batched steps ran before), then
// what H200 run A (gpu-results) left open, few enough that the whole
// benchmark fits a GPU run of minutes: matvec.comp's subgroup variant at
// one vector (it lost at 8 and 16 by 3-6x), matvec_rows at 4 rows a
// subgroup (F16: the profile keeps matvec.comp) and matvec_words at 2, 4
// and 8. Run A's other candidates (matvec_rows at 1 and 2 rows, its i2f
// and shift decodings: the conversion did not matter) are still in the
// table, by name.
func matvecCandidates(d Device, typ, fuse string, nb, cols int) []matvecCandidate {
	withNB := func(spec []uint32) []uint32 {
		s := append([]uint32(nil), spec...)
		if len(s) > 2 {
			s[2] = uint32(nb)
		}
		return s
	}
	own := NewProfile(d)
	name, spec := own.MatvecBatch(typ, fuse, uint32(nb), uint32(nb), uint32(cols))
	out := []matvecCandidate{{"own-" + name, name, spec}}
	add := func(c matvecCandidate) { // what the profile picks is timed once, as own
		if c.name != out[0].name || fmt.Sprint(c.spec) != fmt.Sprint(out[0].spec) {
			out = append(out, c)
		}
	}
	name, spec = own.Matvec(typ, fuse, uint32(nb), uint32(cols))
	add(matvecCandidate{"decode-" + name, name, withNB(spec)})
	sg := d.SubgroupSize
	if nb == 1 {
		add(matvecCandidate{"sg", MatvecFusedName(typ, ReduceSubgroup, fuse), []uint32{4 * sg, sg, uint32(nb)}})
	}
	add(matvecCandidate{"rows-r4", MatvecFusedName(typ, ReduceSubgroupRows, fuse), []uint32{4 * sg, sg, uint32(nb), 4}})
	if slices.Contains(MatvecWordsTypes, typ) { // lanes in interleaved units
		rpss := []uint32{2, 4, 8}
		if nb > 1 {
			rpss = rpss[:2] // 8 rows a subgroup lost to 2 and 4 at 8 and 16 vectors by 2-5x on the H200 (run B)
		}
		for _, rps := range rpss {
			// 4 units in flight, the default, said (the profile's batched pick says it: timed once)
			add(matvecCandidate{fmt.Sprintf("words-r%d", rps), MatvecFusedName(typ, ReduceSubgroupWords, fuse), []uint32{4 * sg, sg, uint32(nb), rps, 4}})
		}
		if nb == 1 {
			add(matvecCandidate{"words-r4-fixed", MatvecFusedName(typ, ReduceSubgroupWords+MatvecWordsFixed, fuse), []uint32{4 * sg, sg, 1, 4}})
		}
		if u := matvecUnroll(uint32(nb)); u < 4 { // fewer units in flight: fewer registers (docs/matvec-cost.md, "Registers")
			for _, rps := range []uint32{2, 4} {
				add(matvecCandidate{fmt.Sprintf("words-r%d-u%d", rps, u), MatvecFusedName(typ, ReduceSubgroupWords, fuse), []uint32{4 * sg, sg, uint32(nb), rps, u}})
			}
		}
	}
	if nb > 1 && slices.Contains(MatvecDotTypes, typ) && d.IntegerDotProduct { // a batched step's, in tiles (MODRUN_MATVEC_DOT)
		spec := MatvecDotBatchSpec(fuse, sg, uint32(nb), uint32(cols))
		add(matvecCandidate{"dot", MatvecFusedName(typ, ReduceSubgroupDot, fuse), spec})
		// x quantized once by dot_x (timed with it), each workgroup
		// copying its tiles: the knob's batched path.
		add(matvecCandidate{"dot-pre", MatvecFusedName(typ, ReduceSubgroupDot+MatvecDotPre, fuse), spec})
		if spec[3]*matvecWalks(fuse) < 4 { // 4 rows walked: each x from shared memory serves twice the rows
			spec = append([]uint32(nil), spec...)
			spec[3] = max(4/matvecWalks(fuse), 1)
			add(matvecCandidate{"dot-w4", MatvecFusedName(typ, ReduceSubgroupDot, fuse), spec})
		}
	}
	if nb == 1 && slices.Contains(MatvecDotTypes, typ) && d.IntegerDotProduct { // integer dot products against x in 8 bits (MODRUN_MATVEC_DOT)
		for _, rps := range []uint32{2, 4} {
			spec := MatvecDotSpec(typ, sg, uint32(cols))
			spec[3] = rps
			add(matvecCandidate{fmt.Sprintf("dot-r%d", rps), MatvecFusedName(typ, ReduceSubgroupDot, fuse), spec})
		}
		if typ != MatvecQ8_0 { // a group a row in flight instead of 2: fewer registers
			spec := MatvecDotSpec(typ, sg, uint32(cols))
			spec[4] = 1
			add(matvecCandidate{"dot-r4-u1", MatvecFusedName(typ, ReduceSubgroupDot, fuse), spec})
		}
		// 8 subgroups a workgroup: each workgroup quantizes x for twice the
		// rows (the prologue's share of the work halved), at half the
		// workgroups in flight.
		spec := MatvecDotSpec(typ, sg, uint32(cols))
		spec[0] = 8 * sg
		add(matvecCandidate{"dot-r4-wg8", MatvecFusedName(typ, ReduceSubgroupDot, fuse), spec})
		// x quantized once by dot_x (timed with it) instead of by each
		// workgroup: whether the decode's prologue (~0.6 instructions a
		// weight) is worth a dispatch more a product.
		add(matvecCandidate{"dot-r4-pre", MatvecFusedName(typ, ReduceSubgroupDot+MatvecDotPre, fuse), MatvecDotSpec(typ, sg, uint32(cols))})
	}
	return out
}

// matvecGPUCase is one shape's weights (ggml bytes and as the GPU reads
// them), n vectors, the add's y0 and the norm's weight, and the reference
// on the sampled rows.
type matvecGPUCase struct {
	typ      gguf.TensorType
	sh       matvecGPUShape
	wRows, n int
	gpu      []byte
	x, y0    []float32 // [n][cols], [n][rows]
	nw       []float32 // [cols]
	sample   []int     // the rows checked
	// want and scale are [n][len(sample)] for each count of vectors k
	// (1..n): the norm of vector s does not depend on k, so one table.
	want, scale []float64
	kernels     map[string]*vk.Kernel
	ws          []*vk.Buffer // weights (copies): see weights
}

func newMatvecGPUCase(b *testing.B, typ gguf.TensorType, sh matvecGPUShape, n int) *matvecGPUCase {
	rng := rand.New(rand.NewSource(int64(sh.rows + sh.cols)))
	c := &matvecGPUCase{typ: typ, sh: sh, wRows: sh.rows, n: n, kernels: map[string]*vk.Kernel{}}
	if sh.fuse == FuseNormSwiGLU {
		c.wRows = 2 * sh.rows
	}
	ggml := randomBlocks(b, typ, c.wRows, sh.cols, rng)
	var err error
	c.gpu, err = MatvecBytes(matvecTypeOf[typ], ggml, c.wRows, sh.cols)
	require.NoError(b, err)
	c.x, c.y0, c.nw = make([]float32, n*sh.cols), make([]float32, n*sh.rows), make([]float32, sh.cols)
	for i := range c.x {
		c.x[i] = float32(rng.NormFloat64())
	}
	for i := range c.y0 {
		c.y0[i] = float32(rng.NormFloat64())
	}
	for i := range c.nw {
		c.nw[i] = float32(0.5 + rng.Float64())
	}
	for r := 0; r < sh.rows; r += 61 {
		c.sample = append(c.sample, r)
	}
	if last := sh.rows - 1; c.sample[len(c.sample)-1] != last {
		c.sample = append(c.sample, last)
	}
	rowBytes := len(ggml) / c.wRows
	row := func(r int) []float32 {
		out := make([]float32, sh.cols)
		require.NoError(b, gguf.Dequantize(typ, ggml[r*rowBytes:(r+1)*rowBytes], out))
		return out
	}
	const eps = 1e-5
	c.want, c.scale = make([]float64, n*len(c.sample)), make([]float64, n*len(c.sample))
	for i, r := range c.sample {
		wg := row(r)
		var wu []float32
		if sh.fuse == FuseNormSwiGLU {
			wu = row(sh.rows + r)
		}
		for s := 0; s < n; s++ {
			x := c.x[s*sh.cols : (s+1)*sh.cols]
			xs := make([]float64, sh.cols)
			for j := range xs {
				xs[j] = float64(x[j])
			}
			if sh.fuse == FuseNorm || sh.fuse == FuseNormSwiGLU {
				var ss float32
				for _, v := range x {
					ss += v * v
				}
				inv := 1 / math.Sqrt(float64(ss/float32(sh.cols)+eps))
				for j := range xs {
					xs[j] *= inv * float64(c.nw[j])
				}
			}
			dot := func(w []float32) (sum, abs float64) {
				for j, xv := range xs {
					sum += float64(w[j]) * xv
					abs += math.Abs(float64(w[j]) * xv)
				}
				return sum, abs
			}
			g, ga := dot(wg)
			at := s*len(c.sample) + i
			switch sh.fuse {
			case FuseAdd:
				y0 := float64(c.y0[s*sh.rows+r])
				c.want[at], c.scale[at] = y0+g, math.Abs(y0)+ga
			case FuseNormSwiGLU:
				u, ua := dot(wu)
				silu := g / (1 + math.Exp(-g))
				c.want[at], c.scale[at] = silu*u, 1.1*ga*math.Abs(u)+math.Abs(silu)*ua
			default:
				c.want[at], c.scale[at] = g, ga
			}
		}
	}
	return c
}

// randomBlocks is rows x cols of typ as random ggml blocks: random quants,
// and scales (the f16 fields) drawn from a sane range, so that no value is
// a NaN or huge. F16 is random normal values.
func randomBlocks(b *testing.B, typ gguf.TensorType, rows, cols int, rng *rand.Rand) []byte {
	if typ == gguf.TypeF16 {
		out := make([]byte, 2*rows*cols)
		for i := 0; i < rows*cols; i++ {
			binary.LittleEndian.PutUint16(out[2*i:], gguf.F32ToF16(float32(rng.NormFloat64())))
		}
		return out
	}
	// The f16 fields of each block: offsets in the block.
	halves := map[gguf.TensorType][]int{
		gguf.TypeQ8_0: {0}, gguf.TypeQ4_0: {0}, gguf.TypeQ4_K: {0, 2}, gguf.TypeQ6_K: {208},
	}[typ]
	require.NotNil(b, halves, "randomBlocks: no block layout for %s", typ)
	blockBytes := typ.BlockBytes()
	blocks := rows * cols / typ.BlockSize()
	out := make([]byte, blocks*blockBytes)
	rng.Read(out)
	for blk := 0; blk < blocks; blk++ {
		for _, off := range halves {
			binary.LittleEndian.PutUint16(out[blk*blockBytes+off:], gguf.F32ToF16(float32(0.002+0.01*rng.Float64())))
		}
	}
	return out
}

// weights are the case's copies of the weights on dev, made at the first
// call: together past 256 MiB (one on a CPU device), the first is checked.
func (c *matvecGPUCase) weights(b *testing.B, dev *vk.Device) []*vk.Buffer {
	if c.ws != nil {
		return c.ws
	}
	copies := max(1, (256<<20+len(c.gpu)-1)/len(c.gpu))
	if dev.Info().Type == vk.CPU {
		copies = 1
	}
	for i := 0; i < copies; i++ {
		w, err := dev.NewBuffer(uint64(len(c.gpu)), vk.DeviceLocal)
		require.NoError(b, err)
		c.ws = append(c.ws, w)
		require.NoError(b, w.Upload(c.gpu, 0))
	}
	return c.ws
}

// closeKernels closes the case's kernels and weights (b's cleanups run
// after each of its runs: these outlive them).
func (c *matvecGPUCase) closeKernels() {
	for _, k := range c.kernels {
		k.Close()
	}
	for _, w := range c.ws {
		w.Close()
	}
}

// bench validates candidate cand at nb vectors, then times it.
func (c *matvecGPUCase) bench(b *testing.B, dev *vk.Device, cand matvecCandidate, nb int, probe float64) {
	kernel := func(name string, spec []uint32) *vk.Kernel {
		key := fmt.Sprint(name, spec)
		k, ok := c.kernels[key]
		if !ok {
			v, err := Lookup(name)
			require.NoError(b, err)
			k, err = dev.NewKernel(v.SPIRV(), vk.KernelSpec{Name: v.Name, Bindings: len(v.Bindings),
				PushConstantBytes: v.PushBytes(), Specialization: spec})
			require.NoError(b, err)
			c.kernels[key] = k // closed with the case (closeKernels): b's cleanups run after each of its runs
		}
		return k
	}
	k := kernel(cand.name, cand.spec)
	sh := c.sh
	push := vk.MustPackPush(MatvecPush{Rows: uint32(sh.rows), Cols: uint32(sh.cols), N: uint32(nb), Eps: 1e-5})
	groups := MatvecGroups(uint32(sh.rows), cand.spec)
	xb := newBuffer(b, dev, f32bytes(c.x[:nb*sh.cols]))
	nwb := newBuffer(b, dev, f32bytes(c.nw))
	norm := sh.fuse == FuseNorm || sh.fuse == FuseNormSwiGLU
	// A PREQ candidate reads x as dot_x quantizes it, dispatched before
	// each call and timed with it.
	var pre func(rec *vk.Recorder)
	in := xb
	if dx, ok := MatvecDotPreX(cand.name); ok {
		dk := kernel(dx, nil)
		xq := newBuffer(b, dev, make([]byte, DotXBytes(uint32(nb), uint32(sh.cols))))
		dxBinds := []vk.Bind{{Buf: xb, Access: vk.Read}, {Buf: xq, Access: vk.Write}}
		if norm {
			dxBinds = append(dxBinds, vk.Bind{Buf: nwb, Access: vk.Read})
		}
		pre = func(rec *vk.Recorder) { rec.Dispatch(dk, push, DotXGroups(uint32(nb), uint32(sh.cols)), dxBinds...) }
		in, norm = xq, false
	}
	binds := func(w, y *vk.Buffer) []vk.Bind {
		out := []vk.Bind{{Buf: w, Access: vk.Read}, {Buf: in, Access: vk.Read}, {Buf: y, Access: vk.Write}}
		if sh.fuse == FuseAdd {
			out[2].Access = vk.ReadWrite
		}
		if norm {
			out = append(out, vk.Bind{Buf: nwb, Access: vk.Read})
		}
		return out
	}
	ws := c.weights(b, dev)
	copies := len(ws)
	yb := newBuffer(b, dev, f32bytes(c.y0[:nb*sh.rows]))
	check := dev.NewRecorder()
	if pre != nil {
		pre(check)
	}
	check.Dispatch(k, push, groups, binds(ws[0], yb)...)
	require.NoError(b, dev.Run(check))
	check.Close()
	y := download(b, yb, nb*sh.rows)
	got := make([]float32, 0, nb*len(c.sample))
	var want, scale []float64
	for s := 0; s < nb; s++ {
		for i, r := range c.sample {
			got = append(got, y[s*sh.rows+r])
			want, scale = append(want, c.want[s*len(c.sample)+i]), append(scale, c.scale[s*len(c.sample)+i])
		}
	}
	tol := matvecTolerance[c.typ]
	if strings.Contains(cand.name, ReduceSubgroupDot) {
		// x quantized to 8 bits: up to half a step of each block, max|x|/254,
		// a weight; with these rows' normal x about 1% of the terms'
		// magnitudes at the worst, far below a wrong kernel's error
		// (TestMatvecDot checks it against its exact reference).
		tol = 1e-2
	}
	if err := closeness(got, want, scale, tol); err != nil {
		b.Fatalf("%s%v: wrong before timing: %v", cand.name, cand.spec, err)
	}

	const perRun = 8
	rec := dev.NewRecorder()
	defer rec.Close()
	for i := 0; i < perRun; i++ {
		if pre != nil {
			pre(rec)
		}
		rec.Dispatch(k, push, groups, binds(ws[i%copies], yb)...)
	}
	perCall := timeReplays(b, dev, rec) / perRun
	gbs := float64(len(c.gpu)) / perCall
	b.ReportMetric(perCall/1e3, "us/call")
	b.ReportMetric(gbs, "GB/s")
	if probe > 0 {
		b.ReportMetric(100*gbs/probe, "%probe")
	}
}

// timeReplays runs rec b.N times after a warm run and returns the
// nanoseconds of one run: by the GPU's clock where the device writes
// timestamps (a timestamp ends rec), else by the host's.
func timeReplays(b *testing.B, dev *vk.Device, rec *vk.Recorder) float64 {
	rec.Timestamp("replay")
	require.NoError(b, dev.Run(rec)) // warm
	var gpuNS float64
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := dev.Run(rec); err != nil {
			b.Fatal(err)
		}
		if t := rec.Timings(); len(t) == 1 {
			gpuNS += t[0].NS
		}
	}
	ns := float64(time.Since(start).Nanoseconds())
	if gpuNS > 0 {
		ns = gpuNS
	}
	return ns / float64(b.N)
}

// probeGBps is the device's streaming rate by probe_read over a buffer
// past the caches (256 MiB on a GPU, 32 MiB on a CPU device), best of 5
// runs of 10 passes.
func probeGBps(b *testing.B, dev *vk.Device) float64 {
	size := uint64(256 << 20)
	if dev.Info().Type == vk.CPU {
		size = 32 << 20
	}
	fillV, err := Lookup("probe_fill")
	require.NoError(b, err)
	readV, err := Lookup("probe_read")
	require.NoError(b, err)
	fill, read := newKernel(b, dev, fillV), newKernel(b, dev, readV)
	src, err := dev.NewBuffer(size, vk.DeviceLocal)
	require.NoError(b, err)
	defer src.Close()
	sink, err := dev.NewBuffer(16, vk.DeviceLocal)
	require.NoError(b, err)
	defer sink.Close()
	n := uint32(size / 16)
	push := vk.MustPackPush(ProbePush{N: n, Magic: 0x5eed1e55})
	groups := ProbeGroups(n)
	rec := dev.NewRecorder()
	defer rec.Close()
	rec.Dispatch(fill, push, groups, vk.Bind{Buf: src, Access: vk.Write})
	rec.Timestamp("fill")
	const passes = 10
	for i := 0; i < passes; i++ {
		rec.Dispatch(read, push, groups, vk.Bind{Buf: src, Access: vk.Read}, vk.Bind{Buf: sink, Access: vk.Write})
	}
	rec.Timestamp("read")
	best := 0.0
	for i := 0; i < 5; i++ {
		start := time.Now()
		require.NoError(b, dev.Run(rec))
		// Without timestamps the wall clock counts the fill as one more pass.
		ns, reads := float64(time.Since(start).Nanoseconds()), float64(passes+1)
		if t := rec.Timings(); len(t) == 2 && t[1].NS > 0 {
			ns, reads = t[1].NS, passes
		}
		best = max(best, float64(size)*reads/ns)
	}
	return best
}
