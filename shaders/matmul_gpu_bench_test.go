package shaders

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/require"
)

// matmulBenchShape is one product of BenchmarkMatmulGPU: n tokens through
// a rows x cols weight (cols inputs, rows outputs).
type matmulBenchShape struct{ n, rows, cols int }

// The prefill shapes of the 1.1B (2048, 5632) and 7B (4096, 11008) models
// at 512 tokens, and the 7B FFN at a handful of rows (a 5-token prompt, a
// decode step of 16 or 32 sequences), where one pass over the weights
// should be the cost.
var matmulGPUShapes = []matmulBenchShape{
	{512, 2048, 2048}, {512, 5632, 2048}, {512, 2048, 5632},
	{512, 4096, 4096}, {512, 11008, 4096},
	{5, 11008, 4096}, {16, 11008, 4096}, {32, 11008, 4096},
	// The 1.1B model's K and V (256 rows) at 512 tokens, and a routed
	// block's q at capacity 1/8 of 512 tokens: grids too small to fill a
	// GPU with the direct product's 64x128 tiles (16 workgroups each)
	// unless cut along K.
	{512, 256, 2048}, {64, 2048, 2048},
}

// On a CPU device (lavapipe) the same candidates on tiny shapes: a check
// that the benchmark and its kernels run, not a speed that means much.
var matmulCPUShapes = []matmulBenchShape{{5, 64, 256}, {33, 96, 256}}

var matmulBenchTypes = []gguf.TensorType{gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_K}

// matmulCandidate is one kernel and tile BenchmarkMatmulGPU times.
type matmulCandidate struct {
	name    string
	variant func(typ string) string
	spec    []uint32
	groups  func(rows, n uint32) [3]uint32
	coop    bool // needs VK_NV_cooperative_matrix
	khr     bool // needs VK_KHR_cooperative_matrix (and subgroups of 32, required where the device's are another size)
	cpuOnly bool // the emulated product: run on CPU devices only (slow, and the GPU has the real one)
	tol     float64
	// split cuts K as a GPU profile does (matmulBenchSplit: MatmulSplit
	// with MatmulSplitTarget, on every device) into the slices' partial
	// sums and splitk_reduce; shapes whose grid is full enough stay whole.
	split bool
	// xsplit: x goes through split_halves first (COOP_XSPLIT), that pass
	// timed with the product (once a call: an engine would split an x once
	// for the several products that read it).
	xsplit bool
	// direct: matmul_direct with this tile over planes of W and X
	// (planes.comp); hilo its f32-precision variant; prep times the planes
	// passes with each call (else they run once, before the timing: W's
	// planes kept, as an engine could keep them resident).
	direct     *MatmulDirectSpec
	hilo, prep bool
}

// matmulBenchSplit is the profile whose split plan the split candidates
// take: a GPU's (MatmulSplitTarget), on lavapipe too.
var matmulBenchSplit = Profile{MatmulSplitTarget: MatmulSplitTarget}

// splitCandidate is c cut along K as a GPU profile cuts it.
func splitCandidate(name string, c matmulCandidate) matmulCandidate {
	c.name, c.split = name, true
	return c
}

// alongSpec is s with W staged along its rows (coalesced loads).
func alongSpec(s MatmulSpec) MatmulSpec {
	s.Along = true
	return s
}

func tiledCandidate(name string, s MatmulSpec) matmulCandidate {
	return matmulCandidate{name: name, variant: MatmulName, spec: s.Constants(), groups: matmulGroupsOf(s)}
}

func prefetchCandidate(name string, s MatmulSpec) matmulCandidate {
	return matmulCandidate{name: name, variant: MatmulPrefetchName, spec: s.Constants(), groups: matmulGroupsOf(s)}
}

// pipeCandidate is a pipelined tile (MatmulSpec.Pipe: matmul_pf, two
// copies of the staged tiles).
func pipeCandidate(name string, s MatmulSpec) matmulCandidate {
	s.Along, s.Pipe = true, true
	return matmulCandidate{name: name, variant: s.Kernel, spec: s.Constants(), groups: matmulGroupsOf(s)}
}

func coopCandidate(name string, s MatmulCoopSpec, emulate bool) matmulCandidate {
	return matmulCandidate{name: name, variant: func(typ string) string { return MatmulCoopName(typ, emulate) },
		spec: s.Constants(), groups: matmulCoopGroupsOf(s), coop: !emulate, cpuOnly: emulate, tol: coopBenchOperands(emulate)}
}

// coopKHRCandidate is the tensor-core kernel through VK_KHR_cooperative_matrix
// (MatmulCoopKHRName; hilo: its COOP_HILO kernel): NVIDIA offers both
// extensions, so its GPU times the kernels AMD and Intel take beside NV's.
func coopKHRCandidate(name string, s MatmulCoopSpec, hilo bool) matmulCandidate {
	c := coopCandidate(name, s, false)
	if hilo {
		c = coopHiloCandidate(name, s, false)
	}
	c.coop, c.khr = false, true
	c.variant = func(typ string) string { return MatmulCoopKHRName(typ, hilo) }
	return c
}

// coopHiloCandidate is coopCandidate for the hilo kernel (COOP_HILO: f32's
// precision from three products a step), the engine's default.
func coopHiloCandidate(name string, s MatmulCoopSpec, emulate bool) matmulCandidate {
	c := coopCandidate(name, s, emulate)
	c.variant = func(typ string) string { return MatmulCoopHiloName(typ, emulate) }
	u := 1.0 / 1024 // toward zero at worst on the tensor cores
	if emulate {
		u = 1.0 / 2048
	}
	// A term within 3u²(1+u)² of itself (matmulCoopHiloBound), and u²
	// more for the low halves that are subnormals (2^-24 of the other
	// operand: well under that at the benchmark's magnitudes).
	c.tol = (1+ulp32)*(1+4*u*u*(1+u)*(1+u)) - 1
	return c
}

// coopPackedCandidate is the COOP_PACKED kernel (matmul_coop.comp: the
// tiles in quads, packed conversions; with hilo the split by a mask), for
// MatmulCoopPackedTypes (matmulBenchTypes).
func coopPackedCandidate(name string, s MatmulCoopSpec, hilo, emulate bool) matmulCandidate {
	c := coopCandidate(name, s, emulate)
	if hilo {
		c = coopHiloCandidate(name, s, emulate)
		if emulate { // hi truncated (2^-10), lo rounded to nearest (2^-11): matmulCoopHiloBoundSplit's operands, and u² for subnormal lows as above
			const uh, u = 1.0 / 1024, 1.0 / 2048
			c.tol = (1+ulp32)*(1+(2*uh*u+uh*uh+u*u)*(1+uh)*(1+uh)) - 1
		}
	}
	c.variant = func(typ string) string { return MatmulCoopPackedName(typ, hilo, emulate) }
	return c
}

// coopXSplitCandidate is the packed hilo kernel reading x split by
// split_halves (COOP_XSPLIT), for MatmulCoopPackedTypes: x's halves
// rounded to nearest, within the packed candidate's bound.
func coopXSplitCandidate(name string, s MatmulCoopSpec, emulate bool) matmulCandidate {
	c := coopPackedCandidate(name, s, true, emulate)
	c.variant = func(typ string) string { return MatmulCoopXSplitName(typ, emulate) }
	c.xsplit = true
	return c
}

// directCandidate is matmul_direct (emulate: its product in plain
// arithmetic, for CPU devices) over planes made by planes.comp, the planes
// timed with each call where prep is set. Its operands are rounded to
// nearest by the planes pass (toHalf), not by a driver's conversion; the
// bound still allows 2^-10 a rounding on the tensor cores, whose f32 sums
// need not round as an f32 addition does.
func directCandidate(name string, s MatmulDirectSpec, hilo, emulate, prep bool) matmulCandidate {
	c := coopCandidate(name, MatmulCoopSpecGPU, emulate)
	if hilo {
		c = coopHiloCandidate(name, MatmulCoopSpecGPU, emulate)
	}
	c.variant = func(string) string { return MatmulDirectName(hilo, emulate) }
	c.spec, c.groups = s.Constants(), func(rows, n uint32) [3]uint32 { return MatmulDirectGroups(rows, n, s) }
	c.direct, c.hilo, c.prep = &s, hilo, prep
	return c
}

// coopBenchOperands is the tensor-core kernels' operand rounding in the
// benchmark's check (coopOperands): to nearest in the emulation (toHalf),
// toward zero at worst on the tensor cores (the driver's conversion).
func coopBenchOperands(emulate bool) float64 {
	if emulate {
		return coopOperands(1.0 / 2048)
	}
	return coopOperands(1.0 / 1024)
}

// matmulCandidates: matmul.comp with its presets and wider or narrower
// tiles, then matmul_coop (last: a tensor-core kernel that a driver
// mishandles should not take the other figures with it).
var matmulCandidates = []matmulCandidate{
	tiledCandidate("tiled-64x64", MatmulSpecGPU),
	tiledCandidate("tiled-cpu-64x32", MatmulSpecCPU),
	tiledCandidate("tiled-128x128", MatmulSpec{BM: 128, BN: 128, BK: 16, TM: 8, TN: 8}),
	tiledCandidate("tiled-32x128", MatmulSpec{BM: 32, BN: 128, BK: 16, TM: 4, TN: 4}),
	tiledCandidate("tiled-16x64", MatmulSpec{BM: 16, BN: 64, BK: 32, TM: 2, TN: 4}),
	tiledCandidate("tiled-8x32", MatmulSpec{BM: 8, BN: 32, BK: 32, TM: 1, TN: 4}),
	prefetchCandidate("tiled-pf-64x64", MatmulSpecGPU),
	prefetchCandidate("tiled-pf-128x128", MatmulSpec{BM: 128, BN: 128, BK: 16, TM: 8, TN: 8}),
	prefetchCandidate("tiled-pf-64x128-k32", MatmulSpec{BM: 64, BN: 128, BK: 32, TM: 8, TN: 8}),
	prefetchCandidate("tiled-pf-16x64", MatmulSpec{BM: 16, BN: 64, BK: 32, TM: 2, TN: 4}),
	// Few rows (issue 43): W staged along its rows (coalesced), K split
	// into slices for more workgroups in flight (MatmulSplit: the GPU
	// profile's plan, which leaves n=512 whole at 11008 rows), and the
	// engine's narrow tiles (narrowSpec in engine/vulkan: BM 8 at 5
	// tokens, 16 at 16, 32 at 32, each with 64 invocations) with both.
	tiledCandidate("tiled-along-64x64", alongSpec(MatmulSpecGPU)),
	splitCandidate("split-64x64", tiledCandidate("", MatmulSpecGPU)),
	splitCandidate("split-along-64x64", tiledCandidate("", alongSpec(MatmulSpecGPU))),
	tiledCandidate("tiled-along-16x64", alongSpec(MatmulSpec{BM: 16, BN: 64, BK: 32, TM: 4, TN: 4})),
	splitCandidate("split-along-8x64", tiledCandidate("", alongSpec(MatmulSpec{BM: 8, BN: 64, BK: 32, TM: 4, TN: 2}))),
	splitCandidate("split-along-16x64", tiledCandidate("", alongSpec(MatmulSpec{BM: 16, BN: 64, BK: 32, TM: 4, TN: 4}))),
	splitCandidate("split-along-32x64", tiledCandidate("", alongSpec(MatmulSpec{BM: 32, BN: 64, BK: 32, TM: 4, TN: 8}))),
	splitCandidate("split-16x64", tiledCandidate("", MatmulSpec{BM: 16, BN: 64, BK: 32, TM: 4, TN: 4})),
	// The same with the next step's loads in flight during the products
	// (MATMUL_PREFETCH), as matmul_coop does: not the engine's pick yet.
	splitCandidate("split-along-pf-8x64", prefetchCandidate("", alongSpec(MatmulSpec{BM: 8, BN: 64, BK: 32, TM: 4, TN: 2}))),
	splitCandidate("split-along-pf-16x64", prefetchCandidate("", alongSpec(MatmulSpec{BM: 16, BN: 64, BK: 32, TM: 4, TN: 4}))),
	// The pipelined tile (MatmulSpecPipe: the GPU profile's without tensor
	// cores, issue 43 item 1), split as the engine splits it, and its
	// wider and deeper neighbours (the 33 KiB ones skip on lavapipe's 32).
	pipeCandidate("pipe-128x64", MatmulSpecPipe),
	splitCandidate("split-pipe-128x64", pipeCandidate("", MatmulSpecPipe)),
	pipeCandidate("pipe-64x128", MatmulSpec{BM: 64, BN: 128, BK: 16, TM: 4, TN: 8}),
	pipeCandidate("pipe-128x128-k8", MatmulSpec{BM: 128, BN: 128, BK: 8, TM: 8, TN: 8}),
	pipeCandidate("pipe-128x128", MatmulSpec{BM: 128, BN: 128, BK: 16, TM: 8, TN: 8}),
	pipeCandidate("pipe-64x64-k32", MatmulSpec{BM: 64, BN: 64, BK: 32, TM: 8, TN: 4}),
	// Tiles straight from memory (matmul_direct over planes of halves):
	// the planes made once (W's kept resident) or with each call (prep).
	directCandidate("direct-emu-64x128", MatmulDirectSpecGPU, false, true, true),
	directCandidate("direct-hilo-emu-64x128", MatmulDirectSpecGPU, true, true, true),
	directCandidate("direct-64x128", MatmulDirectSpecGPU, false, false, false),
	directCandidate("direct-hilo-64x128", MatmulDirectSpecGPU, true, false, false),
	directCandidate("direct-hilo-prep-64x128", MatmulDirectSpecGPU, true, false, true),
	directCandidate("direct-hilo-32x64", MatmulDirectSpec{BM: 32, BN: 64, WM: 16, WN: 32}, true, false, false),
	directCandidate("direct-128x128", MatmulDirectSpec{BM: 128, BN: 128, WM: 64, WN: 64}, false, false, false),
	// Cut along K as the engine cuts the direct product (Profile.
	// MatmulDirectSplit), the slices summed by splitk_reduce (timed).
	splitCandidate("direct-hilo-emu-split-64x128", directCandidate("", MatmulDirectSpecGPU, true, true, true)),
	splitCandidate("direct-hilo-split-64x128", directCandidate("", MatmulDirectSpecGPU, true, false, false)),
	coopCandidate("coop-emu-64x64", MatmulCoopSpecGPU, true),
	coopCandidate("coop-emu-16x128", MatmulCoopSpecFew, true),
	coopHiloCandidate("coop-hilo-emu-64x64", MatmulCoopSpecGPU, true),
	coopCandidate("coop-64x64", MatmulCoopSpecGPU, false),
	coopHiloCandidate("coop-hilo-64x64", MatmulCoopSpecGPU, false),
	coopKHRCandidate("coop-khr-64x64", MatmulCoopSpecGPU, false),
	coopKHRCandidate("coop-hilo-khr-64x64", MatmulCoopSpecGPU, true),
	// The same with the tiles in quads and packed conversions (and the
	// hilo split by a mask): docs/matmul-cost.md's staging diagnosis.
	coopPackedCandidate("coop-hilo-emu-pk-64x64", MatmulCoopSpecGPU, true, true),
	coopPackedCandidate("coop-pk-64x64", MatmulCoopSpecGPU, false, false),
	coopPackedCandidate("coop-hilo-pk-64x64", MatmulCoopSpecGPU, true, false),
	// And with x split into halves once, by its own pass, instead of in
	// every workgroup that stages it (COOP_XSPLIT).
	coopXSplitCandidate("coop-hilo-emu-pk-xs-64x64", MatmulCoopSpecGPU, true),
	coopXSplitCandidate("coop-hilo-pk-xs-64x64", MatmulCoopSpecGPU, false),
	coopHiloCandidate("coop-hilo-16x128", MatmulCoopSpecFew, false),
	coopCandidate("coop-128x128", MatmulCoopSpecWide, false),
	coopCandidate("coop-16x128", MatmulCoopSpecFew, false),
	// Few rows: narrower tiles of rows make more workgroups (a 7B FFN's
	// 11008 rows are 86 tiles of 128 for 132 SMs) and longer steps fewer
	// barriers.
	coopCandidate("coop-16x64-k64", MatmulCoopSpec{BM: 16, BN: 64, BK: 64, WM: 16, WN: 16}, false),
	coopCandidate("coop-32x64", MatmulCoopSpec{BM: 32, BN: 64, BK: 32, WM: 16, WN: 32}, false),
	coopCandidate("coop-128x64", MatmulCoopSpec{BM: 128, BN: 64, BK: 32, WM: 32, WN: 32}, false),
	// The tensor-core kernels cut along K as well.
	splitCandidate("coop-emu-split-16x128", coopCandidate("", MatmulCoopSpecFew, true)),
	splitCandidate("coop-split-64x64", coopCandidate("", MatmulCoopSpecGPU, false)),
	splitCandidate("coop-split-16x128", coopCandidate("", MatmulCoopSpecFew, false)),
	splitCandidate("coop-split-16x64-k64", coopCandidate("", MatmulCoopSpec{BM: 16, BN: 64, BK: 64, WM: 16, WN: 16}, false)),
}

// matmulBenchWeights is one (type, rows, cols) weight on the device, and
// the values it decodes to (for the references): shared by the token
// counts of a shape, so a 7B FFN of Q4_K is quantized once.
type matmulBenchWeights struct {
	buf     *vk.Buffer
	bytes   int
	decoded []float32 // [rows][cols]
}

// matmulBenchData is one (type, shape)'s buffers on the device and the
// reference for a few of its tokens.
type matmulBenchData struct {
	w, x        *vk.Buffer
	weightBytes int
	tokens      []int       // the tokens checked
	want, scale [][]float64 // [token of tokens][row]: sum W*x in float64, sum |W*x|
	rows, cols  int
	n           int
}

// matmulBenchUpload is data in a device buffer that lasts as long as owner
// (the whole benchmark: every candidate reads it), made in b.
func matmulBenchUpload(b, owner *testing.B, dev *vk.Device, data []byte) *vk.Buffer {
	buf, err := dev.NewBuffer(uint64(len(data)), vk.DeviceLocal)
	require.NoError(b, err)
	owner.Cleanup(buf.Close)
	require.NoError(b, buf.Upload(data, 0))
	return buf
}

func newMatmulBenchWeights(b, owner *testing.B, dev *vk.Device, typ gguf.TensorType, rows, cols int) *matmulBenchWeights {
	b.Helper()
	rng := rand.New(rand.NewSource(int64(rows*7 + cols*3)))
	src := make([]float32, rows*cols)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	raw, err := gguf.Quantize(typ, src)
	require.NoError(b, err)
	require.NoError(b, gguf.Dequantize(typ, raw, src)) // src is now what the kernels multiply by
	layout := matmulLayout(b, typ, raw, rows, cols)
	return &matmulBenchWeights{buf: matmulBenchUpload(b, owner, dev, layout), bytes: len(layout), decoded: src}
}

// newMatmulBenchData makes n tokens of x for weights w and the reference
// on a few of them (all rows).
func newMatmulBenchData(b, owner *testing.B, dev *vk.Device, w *matmulBenchWeights, sh matmulBenchShape) *matmulBenchData {
	b.Helper()
	rng := rand.New(rand.NewSource(int64(sh.n*5 + sh.cols)))
	x := make([]float32, sh.n*sh.cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	d := &matmulBenchData{w: w.buf, x: matmulBenchUpload(b, owner, dev, f32bytes(x)), weightBytes: w.bytes,
		rows: sh.rows, cols: sh.cols, n: sh.n}
	seen := map[int]bool{}
	for _, s := range []int{0, 1, sh.n / 2, sh.n - 1} {
		if s < 0 || s >= sh.n || seen[s] {
			continue
		}
		seen[s] = true
		want, scale := make([]float64, sh.rows), make([]float64, sh.rows)
		xs := x[s*sh.cols : (s+1)*sh.cols]
		for r := 0; r < sh.rows; r++ {
			var sum, abs float64
			for j, wv := range w.decoded[r*sh.cols : (r+1)*sh.cols] {
				t := float64(wv) * float64(xs[j])
				sum += t
				abs += math.Abs(t)
			}
			want[r], scale[r] = sum, abs
		}
		d.tokens, d.want, d.scale = append(d.tokens, s), append(d.want, want), append(d.scale, scale)
	}
	return d
}

// BenchmarkMatmulGPU times every matmul candidate (matmulCandidates) on
// prefill shapes for F16, Q8_0 and Q4_K weights, and reports TFLOP/s, the
// time of one call, and the weight bytes read per second at one pass over
// the weights (the bound for a handful of rows). Each candidate's output
// is checked first against a float64 reference on a few tokens (all rows):
// a kernel that is wrong fails its sub-benchmark and is not timed. On a
// GPU it runs matmulGPUShapes; the tensor-core candidates need
// VK_NV_cooperative_matrix and skip, saying so, without it. On a CPU
// device (lavapipe) it runs tiny shapes, with the emulated tensor-core
// product in place of the real one. Run it on a GPU from the compiled
// test binary:
//
//	go test -c -o shaders.test ./shaders
//	./shaders.test -test.run '^$' -test.bench BenchmarkMatmulGPU -test.benchtime 20x
//
// A timed run is the candidate's dispatch repeated until it takes about
// 2 ms (the call's time is the run's divided by the repeats), so one
// submission's overhead weighs little.
func BenchmarkMatmulGPU(b *testing.B) {
	dev := openDeviceWith(b, vk.InstanceOptions{})
	info := dev.Info()
	cpu := info.Type == vk.CPU
	shapes := matmulGPUShapes
	if cpu {
		shapes = matmulCPUShapes
	}
	b.Logf("device %s (%s), cooperative_matrix_nv %v, cooperative_matrix_khr %v", info.Name, info.Type,
		info.Features.CooperativeMatrixNV, info.Features.CooperativeMatrixKHR)
	type key struct {
		typ gguf.TensorType
		sh  matmulBenchShape
	}
	type wkey struct {
		typ        gguf.TensorType
		rows, cols int
	}
	data, weights := map[key]*matmulBenchData{}, map[wkey]*matmulBenchWeights{}
	owner := b
	for _, cand := range matmulCandidates {
		for _, typ := range matmulBenchTypes {
			for _, sh := range shapes {
				name := fmt.Sprintf("%s/%s/n%d/%dx%d", cand.name, typ, sh.n, sh.rows, sh.cols)
				b.Run(name, func(b *testing.B) {
					switch {
					case cand.cpuOnly && !cpu:
						b.Skip("the emulated product is for CPU devices; this GPU times the real kernels")
					case cand.coop && !info.Features.CooperativeMatrixNV:
						b.Skip("the device lacks VK_NV_cooperative_matrix (16x16x16 f16 -> f32 at subgroup scope)")
					case cand.khr && !info.Features.CooperativeMatrixKHR:
						b.Skip("the device lacks VK_KHR_cooperative_matrix (16x16x16 f16 -> f32 at subgroup scope)")
					}
					d := data[key{typ, sh}]
					if d == nil {
						w := weights[wkey{typ, sh.rows, sh.cols}]
						if w == nil {
							w = newMatmulBenchWeights(b, owner, dev, typ, sh.rows, sh.cols)
							weights[wkey{typ, sh.rows, sh.cols}] = w
						}
						d = newMatmulBenchData(b, owner, dev, w, sh)
						data[key{typ, sh}] = d
					}
					runMatmulCandidate(b, dev, cand, typ, d)
				})
			}
		}
	}
}

func runMatmulCandidate(b *testing.B, dev *vk.Device, cand matmulCandidate, typ gguf.TensorType, d *matmulBenchData) {
	if cand.direct != nil {
		runDirectCandidate(b, dev, cand, typ, d)
		return
	}
	v, err := Lookup(cand.variant(matvecTypeOf[typ]))
	require.NoError(b, err)
	nd, err := v.Needs(cand.spec)
	require.NoError(b, err)
	if lim := dev.Info().Limits; nd.SharedBytes > lim.MaxComputeSharedMemorySize || nd.Invocations > lim.MaxComputeWorkGroupInvocations {
		b.Skipf("%s %v needs %d bytes of shared memory and %d invocations: the device has %d and %d", v.Name, cand.spec,
			nd.SharedBytes, nd.Invocations, lim.MaxComputeSharedMemorySize, lim.MaxComputeWorkGroupInvocations)
	}
	var sg uint32
	if lim := dev.Info().Limits; cand.khr && lim.SubgroupSize != MatmulCoopSubgroup {
		if !lim.RequiredSubgroupSizeCompute || lim.MinSubgroupSize > MatmulCoopSubgroup || lim.MaxSubgroupSize < MatmulCoopSubgroup {
			b.Skipf("%s needs subgroups of 32: the device's are %d and it cannot require 32", v.Name, lim.SubgroupSize)
		}
		sg = MatmulCoopSubgroup
	}
	k, err := dev.NewKernel(v.SPIRV(), vk.KernelSpec{Name: v.Name, Bindings: len(v.Bindings),
		PushConstantBytes: v.PushBytes(), Specialization: cand.spec, RequiredSubgroupSize: sg})
	if err != nil {
		b.Fatalf("%s: the driver refused the kernel: %v", v.Name, err)
	}
	defer k.Close()
	rows, cols, n := uint32(d.rows), uint32(d.cols), uint32(d.n)
	yb, err := dev.NewBuffer(uint64(4*d.rows*d.n), vk.DeviceLocal)
	require.NoError(b, err)
	defer yb.Close()
	splits, slice := uint32(1), cols
	if cand.split {
		splits, slice = matmulBenchSplit.MatmulSplit(rows, cols, n, cand.spec, uint32(typ.BlockSize()))
	}
	b.Logf("%s: %d K slice(s) of %d columns", v.Name, splits, slice)
	var reduce *vk.Kernel
	scratch := yb
	if splits > 1 {
		rv, err := Lookup(MatmulReduceName)
		require.NoError(b, err)
		reduce, err = dev.NewKernel(rv.SPIRV(), vk.KernelSpec{Name: rv.Name, Bindings: len(rv.Bindings), PushConstantBytes: rv.PushBytes()})
		require.NoError(b, err)
		defer reduce.Close()
		scratch, err = dev.NewBuffer(4*uint64(splits)*uint64(d.rows*d.n), vk.DeviceLocal)
		require.NoError(b, err)
		defer scratch.Close()
	}
	var xprep *vk.Kernel
	xWords := d.x
	if cand.xsplit {
		xv, err := Lookup(SplitHalvesName)
		require.NoError(b, err)
		xprep, err = dev.NewKernel(xv.SPIRV(), vk.KernelSpec{Name: xv.Name, Bindings: len(xv.Bindings), PushConstantBytes: xv.PushBytes()})
		require.NoError(b, err)
		defer xprep.Close()
		xWords, err = dev.NewBuffer(d.x.Size(), vk.DeviceLocal)
		require.NoError(b, err)
		defer xWords.Close()
	}
	record := func(reps int) *vk.Recorder {
		rec := dev.NewRecorder()
		w, x, y := vk.Bind{Buf: d.w, Access: vk.Read}, vk.Bind{Buf: xWords, Access: vk.Read}, vk.Bind{Buf: yb, Access: vk.Write}
		for i := 0; i < reps; i++ {
			if xprep != nil {
				recordSplitHalves(rec, xprep, d.x, xWords, uint32(d.n*d.cols))
			}
			if splits <= 1 {
				rec.Dispatch(k, vk.MustPackPush(matmulWhole(rows, cols, n)), cand.groups(rows, n), w, x, y)
				continue
			}
			push := matmulWhole(rows, cols, n)
			push.KSplit = slice
			rec.Dispatch(k, vk.MustPackPush(push), MatmulSplitGroups(rows, n, cand.spec, splits), w, x, vk.Bind{Buf: scratch, Access: vk.Write})
			rec.Dispatch(reduce, vk.MustPackPush(MatmulReducePush{Rows: rows, N: n, Splits: splits, LdY: rows}), MatmulReduceGroups(rows, n),
				vk.Bind{Buf: scratch, Access: vk.Read}, y)
		}
		return rec
	}

	checkAndTimeMatmul(b, dev, v.Name, cand.tol, d, yb, record, splits)
}

// checkAndTimeMatmul checks one call of record's against d's reference
// (y is yb, tol the kernel's operand rounding beyond the f32 sums), then
// times record's repeats and reports the metrics of BenchmarkMatmulGPU.
func checkAndTimeMatmul(b *testing.B, dev *vk.Device, name string, opTol float64, d *matmulBenchData, yb *vk.Buffer, record func(reps int) *vk.Recorder, splits uint32) {
	// Checked first: NaN in y shows an output the kernel skipped.
	check := dev.NewRecorder()
	defer check.Close()
	check.Fill(yb, 0, yb.Size(), 0x7fc00000)
	require.NoError(b, dev.Run(check))
	one := record(1)
	defer one.Close()
	start := time.Now()
	require.NoError(b, dev.Run(one))
	first := time.Since(start)
	got := download(b, yb, d.n*d.rows)
	// The f32 kernels' sums: at most cols roundings of 2^-24 of the sum of
	// |terms| each (the running sum's worst case); the tensor-core kernels
	// add their f16 rounding (coopBenchOperands).
	tol := opTol + float64(d.cols)*math.Pow(2, -24) + 1e-6
	for i, s := range d.tokens {
		if err := closeness(got[s*d.rows:(s+1)*d.rows], d.want[i], d.scale[i], tol); err != nil {
			b.Fatalf("%s: token %d of %d wrong before timing: %v", name, s, d.n, err)
		}
	}

	// Repeats for about 2 ms a run, from the checked call's time (which
	// includes a submission: an underestimate of the repeats, never over).
	reps := 1
	if first > 0 {
		reps = int(min(200, max(1, (2*time.Millisecond)/first)))
	}
	rec := record(reps)
	defer rec.Close()
	require.NoError(b, dev.Run(rec)) // records
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := dev.Run(rec); err != nil {
			b.Fatal(err)
		}
	}
	call := b.Elapsed().Seconds() / float64(b.N*reps)
	flops := 2 * float64(d.rows) * float64(d.cols) * float64(d.n)
	b.ReportMetric(flops/call/1e12, "TFLOP/s")
	b.ReportMetric(call*1e6, "us/call")
	b.ReportMetric(float64(d.weightBytes)/call/1e9, "weight-GB/s")
	b.ReportMetric(float64(reps), "reps")
	b.ReportMetric(float64(splits), "splits")
}

// runDirectCandidate is runMatmulCandidate for the direct matmul: W's and
// X's planes, then the product, checked and timed as the others are.
func runDirectCandidate(b *testing.B, dev *vk.Device, cand matmulCandidate, typ gguf.TensorType, d *matmulBenchData) {
	dk := newDirectKernels(b, dev, typ, *cand.direct, cand.hilo, cand.cpuOnly)
	pl := dk.newPlanes(b, dev, 0, d.rows, d.n, d.cols)
	if cand.split { // the engine's plan on a GPU; on a CPU device slices of a step, so its tiny shapes split too
		prof := NewProfile(Device{ComputeUnits: dev.Info().Limits.ComputeUnits}) // a GPU's plan, for this device's compute units
		if dev.Info().Type == vk.CPU {
			prof.MatmulDirectSlice = 32
		}
		if splits, slice := prof.MatmulDirectSplit(pl.rows, pl.n, pl.colsP, *cand.direct, MatmulMaxSplits); splits > 1 {
			pl.split(b, dev, slice)
		}
	}
	yb, err := dev.NewBuffer(uint64(4*d.rows*d.n), vk.DeviceLocal)
	require.NoError(b, err)
	defer yb.Close()
	name := MatmulDirectName(cand.hilo, cand.cpuOnly)
	b.Logf("%s: planes of W %dx%d and X %dx%d halves (lo planes: W %v, X %v), made %s", name, pl.rowsP, pl.colsP, pl.nP, pl.colsP,
		dk.wLo, dk.hilo, map[bool]string{true: "with each call", false: "once, before the timing"}[cand.prep])
	if !cand.prep {
		rec := dev.NewRecorder()
		dk.recordPlanes(rec, pl, d.w, d.rows, d.x)
		require.NoError(b, dev.Run(rec))
		rec.Close()
	}
	record := func(reps int) *vk.Recorder {
		rec := dev.NewRecorder()
		for i := 0; i < reps; i++ {
			if cand.prep {
				dk.recordPlanes(rec, pl, d.w, d.rows, d.x)
			}
			dk.recordProduct(rec, pl, yb, d.rows)
		}
		return rec
	}
	b.Logf("%s: %d K slice(s) of %d columns", name, max(pl.splits, 1), map[bool]uint32{true: pl.slice, false: pl.colsP}[pl.splits > 1])
	checkAndTimeMatmul(b, dev, name, cand.tol, d, yb, record, max(pl.splits, 1))
}
