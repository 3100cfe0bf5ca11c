package vulkan

import (
	"testing"
	"time"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProfile: with Options.Profile, every kernel of a MoD step has an
// entry, one call per token per dispatch, and the GPU time is positive and
// no more than the wall time of the Feeds.
func TestProfile(t *testing.T) {
	dev := openDevice(t, true)
	if !dev.Info().Timestamps() {
		t.Skipf("%s cannot write timestamps", dev.Info().Name)
	}
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	// A CPU device's profile on any device, so the kernels (and their
	// names) are the same everywhere.
	cpuProf := shaders.NewProfile(shaders.Device{CPU: true, SubgroupSize: dev.Info().Limits.SubgroupSize})
	// The prompts through the matmuls, which this test counts
	// (MODRUN_VEC_ROWS=1: only a 1-token chunk runs as matvecs), so that
	// every matvec call is a decode step's, of one vector.
	run, err := New(dev, m, mod.RoutingRouter, Options{Profile: true, DeviceProfile: &cpuProf, PromptSteps: -1, Knobs: Knobs{"MODRUN_VEC_ROWS": "1"}})
	require.NoError(t, err)
	t.Cleanup(run.Close)

	// A batched prompt (one submit), then three decode steps.
	const submits = 4
	start := time.Now()
	_, err = run.Feed([]int32{1, 400, 401})
	require.NoError(t, err)
	for _, tok := range []int32{402, 403, 404} {
		_, err = run.FeedArgmax([]int32{tok})
		require.NoError(t, err)
	}
	wall := time.Since(start)

	prof := run.Profile()
	byKernel := map[string]ProfileEntry{}
	var total uint64
	for i, e := range prof {
		byKernel[e.Kernel] = e
		total += e.NS
		if i > 0 {
			assert.GreaterOrEqual(t, prof[i-1].NS, e.NS, "sorted by time")
		}
	}
	for _, k := range []string{"embed_f32", "matvec_f32", "rmsnorm", "decode_kv", "decode_attention", "swiglu", "matvec_f32_add",
		"route_decode", "mod_residual_sigmoid", "argmax", "copy",
		"matmul_f32", "prefill_kv_f32", "prefill_count", "gather_pos", "compact_positive_table"} {
		assert.Contains(t, byKernel, k)
	}
	assert.Equal(t, submits, byKernel["embed_f32"].Calls, "one embed per submit")
	assert.Equal(t, submits, byKernel["argmax"].Calls, "one argmax per submit")
	assert.Equal(t, 2*submits, byKernel["mod_residual_sigmoid"].Calls, "one mod_residual per routed layer per submit")
	// A matvec's bytes are its weights' (the o and down matrices for the
	// add: at least o's d x d F32 a call); other kernels have none.
	c := m.Config
	assert.GreaterOrEqual(t, byKernel["matvec_f32_add"].Bytes, uint64(byKernel["matvec_f32_add"].Calls*4*c.NEmbd*c.NEmbd))
	assert.Zero(t, byKernel["rmsnorm"].Bytes)
	assert.Zero(t, byKernel["matmul_f32"].Bytes)
	assert.Positive(t, total)
	assert.LessOrEqual(t, total, uint64(wall.Nanoseconds()), "GPU time within the wall time")
	// FLOPs: counted for the matmuls and matvecs the host sizes, never for
	// a routed block's indirect dispatches (decode: every routed layer's
	// matvecs) nor for kernels that only move data.
	for _, e := range prof {
		assert.LessOrEqual(t, e.FLOPCalls, e.Calls, e.Kernel)
		assert.LessOrEqual(t, e.FLOPNS, e.NS, e.Kernel)
		assert.Equal(t, e.FLOPCalls > 0, e.FLOPs > 0, e.Kernel)
	}
	assert.Positive(t, byKernel["matmul_f32"].FLOPCalls)
	assert.Equal(t, "fp32", byKernel["matmul_f32"].Path)
	assert.Less(t, byKernel["matvec_f32_add"].FLOPCalls, byKernel["matvec_f32_add"].Calls, "a routed layer's matvecs are indirect")
	assert.Zero(t, byKernel["rmsnorm"].FLOPCalls)
	assert.Zero(t, byKernel["copy"].FLOPCalls)

	plain := newRunner(t, dev, m, mod.RoutingRouter)
	assert.Nil(t, plain.Profile(), "no profile unless asked for")

	// Eval mode is the same recorder: its kernels are profiled too.
	e, err := NewEvaluator(dev, m, Options{Profile: true, DeviceProfile: &cpuProf})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	_, err = e.Losses([]int32{1, 400, 401, 402, 403})
	require.NoError(t, err)
	byKernel = map[string]ProfileEntry{}
	for _, pe := range e.Profile() {
		byKernel[pe.Kernel] = pe
	}
	for _, k := range []string{"embed_f32", "matmul_f32", "rope", "attention_split", "attention_merge", "router_score", "topk", "gather_pos",
		"mod_residual_sigmoid", "nll"} {
		assert.Contains(t, byKernel, k, "eval mode")
	}
	assert.Equal(t, 2, byKernel["mod_residual_sigmoid"].Calls, "one mod_residual per routed layer")
}

// TestMemoryStats: the weights take at least the file's tensor bytes (F32
// and quantized matrices are uploaded as stored, vectors decoded to F32),
// the KV caches are keys, values and positions for ContextLen tokens, and
// the three parts add up to every buffer the runner holds.
func TestMemoryStats(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	for kv, elem := range map[string]int{"f32": 4, "f16": 2} {
		run, err := New(dev, m, mod.RoutingRouter, Options{ContextLen: 100, KVType: kv})
		require.NoError(t, err)
		t.Cleanup(run.Close)

		ms := run.MemoryStats()
		var fileBytes uint64
		for _, ti := range m.File.Tensors {
			fileBytes += ti.Size
		}
		assert.GreaterOrEqual(t, ms.Weights, fileBytes)
		c := m.Config
		assert.Equal(t, uint64(c.NLayer*100*(2*c.KVDim()*elem+4)), ms.KVCache, "%s cache: keys, values, positions", kv)
		var all uint64
		for _, b := range run.bufs {
			all += b.Size()
		}
		assert.Equal(t, all, ms.Total())
		assert.Positive(t, ms.Scratch)
	}
}

// TestFeedArgmax: FeedArgmax returns the argmax of the logits Feed returns
// for the same sequence, under each profile (a GPU's: argmax_wide, the
// row over many workgroups; the second sequence finds its counter as the
// first left it).
func TestFeedArgmax(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	for _, pc := range deviceProfiles(dev) {
		t.Run(pc.name, func(t *testing.T) {
			run, err := New(dev, m, mod.RoutingRouter, Options{KVType: "f32", DeviceProfile: pc.prof})
			require.NoError(t, err)
			t.Cleanup(run.Close)
			seq := []int32{1, 400, 401, 402, 403}
			var want []int32
			for _, tok := range seq {
				logits, err := run.Feed([]int32{tok})
				require.NoError(t, err)
				want = append(want, stats.Argmax(logits))
			}
			for i := 0; i < 2; i++ {
				run.Reset()
				var got []int32
				for _, tok := range seq {
					id, err := run.FeedArgmax([]int32{tok})
					require.NoError(t, err)
					got = append(got, id)
				}
				assert.Equal(t, want, got, "sequence %d", i)
			}
			_, err = run.FeedArgmax([]int32{-1})
			assert.ErrorContains(t, err, "outside the vocabulary")
		})
	}
}

// TestProfileFLOPs: a dense model's attention FLOPs in the profile are the
// hand count of a causal row's keys (4*headDim per head and key), through a
// prefill at position 0, two decode steps and a second prefill (each
// replay's own start), and an F32 matvec's FLOPs are half its weight bytes
// (2 per weight, 4 bytes each): push constants and bindings agree.
func TestProfileFLOPs(t *testing.T) {
	dev := openDevice(t, true)
	if !dev.Info().Timestamps() {
		t.Skipf("%s cannot write timestamps", dev.Info().Name)
	}
	m := openModel(t, "../../testdata/mod/dense-rand.gguf")
	c := m.Config
	require.Empty(t, c.RoutedLayers(), "a dense model")
	cpuProf := shaders.NewProfile(shaders.Device{CPU: true, SubgroupSize: dev.Info().Limits.SubgroupSize})
	// The prompts through the matmuls, which this test counts
	// (MODRUN_VEC_ROWS=1: only a 1-token chunk runs as matvecs), so that
	// every matvec call is a decode step's, of one vector.
	run, err := New(dev, m, mod.RoutingRouter, Options{Profile: true, DeviceProfile: &cpuProf, PromptSteps: -1, Knobs: Knobs{"MODRUN_VEC_ROWS": "1"}})
	require.NoError(t, err)
	t.Cleanup(run.Close)

	_, err = run.Feed([]int32{1, 400, 401, 402, 403}) // positions 0-4: 1+2+3+4+5 keys
	require.NoError(t, err)
	for _, tok := range []int32{404, 405} { // positions 5 and 6: 6 and 7 keys
		_, err = run.FeedArgmax([]int32{tok})
		require.NoError(t, err)
	}
	_, err = run.Feed([]int32{406, 407, 408}) // positions 7-9: 8+9+10 keys
	require.NoError(t, err)

	byKernel := map[string]ProfileEntry{}
	for _, e := range run.Profile() {
		byKernel[e.Kernel] = e
	}
	perKey := uint64(4 * c.NHead * c.HeadDim)
	layers := uint64(c.NLayer)
	split := byKernel["attention_split_counts"]
	assert.Equal(t, layers*(1+2+3+4+5+8+9+10)*perKey, split.FLOPs, "prefill attention")
	assert.Equal(t, split.Calls, split.FLOPCalls)
	dec := byKernel["decode_attention"]
	assert.Equal(t, layers*(6+7)*perKey, dec.FLOPs, "decode attention")
	assert.Equal(t, dec.Calls, dec.FLOPCalls)
	for _, e := range byKernel {
		if len(e.Kernel) > 10 && e.Kernel[:10] == "matvec_f32" {
			assert.Equal(t, e.Bytes/2, e.FLOPs, "%s: 2 FLOPs per 4-byte weight", e.Kernel)
			assert.Equal(t, e.Calls, e.FLOPCalls, e.Kernel)
		}
	}

	// Attention in groups of 64 rows (a binding range too small for the
	// partial results of all): a group's push constants do not say where
	// its rows start, so its keys are not counted.
	defer func() { attentionRange = 0 }()
	splits := uint64(shaders.AttentionSplits(uint32(c.ContextLen), cpuProf.AttentionSplitLen(uint32(c.HeadDim))))
	attentionRange = 64*4*uint64(c.NHead)*splits*uint64(c.HeadDim) + 4
	grouped, err := New(dev, m, mod.RoutingRouter, Options{Profile: true, DeviceProfile: &cpuProf})
	require.NoError(t, err)
	t.Cleanup(grouped.Close)
	require.Equal(t, uint32(64), grouped.attentionGroupRows(100, uint32(grouped.ctx)))
	tokens := make([]int32, 100)
	for i := range tokens {
		tokens[i] = int32(300 + i)
	}
	_, err = grouped.Feed(tokens)
	require.NoError(t, err)
	found := false
	for _, e := range grouped.Profile() {
		if e.Kernel == "attention_split_counts" {
			found = true
			assert.Greater(t, e.Calls, 1, "groups of rows")
			assert.Zero(t, e.FLOPCalls, "grouped rows")
		}
	}
	assert.True(t, found, "attention_split_counts ran")
}

// TestProfileMatmulDirect: under a profile with the direct matmul
// (MODRUN_MATMUL_DIRECT=1; its product emulated here), a prompt of
// MatmulDirectMin rows or more runs the blocks' matmuls as W's and X's
// planes passes (X's shared by the products of one input: q, k and v;
// gate and up) and matmul_direct's product (FLOPs counted for the
// product only), while the output head, whose planes would pass the
// block-sized scratch, and a shorter prompt keep the staged tensor-core
// kernel. The logits are the staged kernel's (both emulations sum the same
// three products in the same order: equal here; TestPrefillProfiles
// checks them against the CPU at every row count).
func TestProfileMatmulDirect(t *testing.T) {
	dev := openDevice(t, true)
	if !dev.Info().Timestamps() {
		t.Skipf("%s cannot write timestamps", dev.Info().Name)
	}
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	prof := DeviceProfile(dev.Info())
	prof.MatmulCoop, prof.MatmulCoopEmulate = true, true
	direct := prof
	direct.MatmulDirect, direct.MatmulDirectMin = true, shaders.MatmulDirectMinRows
	prompt := make([]int32, 9+shaders.MatmulDirectMinRows+5)
	for i := range prompt {
		prompt[i] = int32(300 + i)
	}
	var logits [2][]float32
	for i, p := range []*shaders.Profile{&prof, &direct} {
		run, err := New(dev, m, mod.RoutingRouter, Options{Profile: true, DeviceProfile: p, PromptSteps: -1})
		require.NoError(t, err)
		defer run.Close()
		_, err = run.Feed(prompt[:9]) // under MatmulDirectMin
		require.NoError(t, err)
		byKernel := map[string]ProfileEntry{}
		for _, e := range run.Profile() {
			byKernel[e.Kernel] = e
		}
		assert.NotContains(t, byKernel, shaders.MatmulDirectName(true, true), "%s: 9 rows", p)
		logits[i], err = run.Feed(prompt[9:])
		require.NoError(t, err)
		byKernel = map[string]ProfileEntry{}
		for _, e := range run.Profile() {
			byKernel[e.Kernel] = e
		}
		if p == &prof {
			assert.NotContains(t, byKernel, shaders.MatmulDirectName(true, true), "%s", p)
			continue
		}
		dense := m.Config.NLayer - len(m.Config.RoutedLayers())
		mul := byKernel[shaders.MatmulDirectName(true, true)]
		assert.GreaterOrEqual(t, mul.Calls, 7*dense, "q, k, v, o, gate, up and down of each dense block")
		assert.Equal(t, 7*dense, mul.FLOPCalls, "the dense blocks' products' FLOPs counted (a routed block's count is on the GPU)")
		// W's planes a product, X's once for q, k and v, once for gate and
		// up, and once each for o and down (F32 weights: one variant).
		assert.Equal(t, mul.Calls+mul.Calls/7*4, byKernel[shaders.PlanesName(shaders.MatvecF32, true)].Calls, "planes passes: 7 of W's and 4 of X's a block")
		assert.Zero(t, byKernel[shaders.PlanesName(shaders.MatvecF32, true)].FLOPCalls, "a planes pass counts no FLOPs")
		assert.Positive(t, byKernel[shaders.MatmulCoopHiloName(shaders.MatvecF32, true)].Calls, "the output head and the 9-row chunk stay staged")
	}
	d := maxAbsDiff(logits[0], logits[1])
	assert.LessOrEqual(t, d, 1e-3, "the direct and staged kernels' logits")
	t.Logf("max |logit diff| direct against staged: %.3g", d)
}

// TestProfileMatmulDirectSplit: under a GPU's profile the direct products
// whose grid is small are cut along K (shaders.Profile.MatmulDirectSplit;
// a slice of one step here, so every product of this model's 64 and 172
// columns is), each followed by splitk_reduce, with the product's FLOPs
// counted once, as unsplit; the logits within a few f32 roundings of the
// unsplit product's (a slice's sum restarts from zero: the order
// differs).
func TestProfileMatmulDirectSplit(t *testing.T) {
	dev, m := timedModel(t, nil)
	whole := gpuProfileOn(DeviceProfile(dev.Info()).Device, false)
	whole.MatmulCoop, whole.MatmulCoopEmulate, whole.MatmulDirect, whole.MatmulDirectMin = true, true, true, 0
	split := whole
	split.MatmulDirectSlice = 32
	dense := m.Config.NLayer - len(m.Config.RoutedLayers())
	var logits [2][]float32
	var flops [2]uint64
	for i, p := range []*shaders.Profile{&whole, &split} {
		var byKernel map[string]ProfileEntry
		logits[i], byKernel, _ = feedProfiled(t, dev, m, p)
		mul := byKernel[shaders.MatmulDirectName(true, true)]
		assert.GreaterOrEqual(t, mul.Calls, 7*dense, "%s: q, k, v, o, gate, up and down of each dense block", p)
		flops[i] = mul.FLOPs
		reduce := byKernel[shaders.MatmulReduceName].Calls
		if p == &whole {
			assert.Zero(t, reduce, "slices of 256 columns or more: none of this model's products is cut")
			continue
		}
		assert.Equal(t, mul.Calls, reduce, "a reduce after each product")
	}
	assert.Positive(t, flops[0])
	assert.Equal(t, flops[0], flops[1], "the split products' FLOPs counted once")
	d := maxAbsDiff(logits[0], logits[1])
	assert.LessOrEqual(t, d, 1e-3, "the split and whole products' logits")
	t.Logf("max |logit diff| split against whole: %.3g", d)
}

// TestMatmulDirectF16OwnPlane: with F16 weights the direct matmul binds
// a part of a matrix as its own hi plane where its padding rows lie in its
// binding (here q, the first of the q|k|v stack, and gate, the first of
// gate|up: 2 of a block's 7 products), reading the rows after it as
// padding, and makes W's planes for the rest; the logits are the staged
// tensor-core kernel's (the same two products of the same halves), which
// the CPU checks elsewhere.
func TestMatmulDirectF16OwnPlane(t *testing.T) {
	dev, m := timedModel(t, func(b *mod.Block) map[*mod.Mat]gguf.TensorType {
		return map[*mod.Mat]gguf.TensorType{&b.Q: gguf.TypeF16, &b.K: gguf.TypeF16, &b.V: gguf.TypeF16, &b.O: gguf.TypeF16,
			&b.Gate: gguf.TypeF16, &b.Up: gguf.TypeF16, &b.Down: gguf.TypeF16}
	})
	staged := gpuProfileOn(DeviceProfile(dev.Info()).Device, false)
	staged.MatmulCoop, staged.MatmulCoopEmulate = true, true
	direct := staged
	direct.MatmulDirect, direct.MatmulDirectMin = true, 0
	want, _, _ := feedProfiled(t, dev, m, &staged)
	got, byKernel, _ := feedProfiled(t, dev, m, &direct)
	mul := byKernel[shaders.MatmulDirectName(true, true)].Calls
	require.Positive(t, mul)
	require.Zero(t, mul%7, "7 products a block")
	assert.Equal(t, mul/7*5, byKernel[shaders.PlanesName(shaders.MatvecF16, false)].Calls,
		"W's planes for k, v, o, up and down; q and gate their own")
	d := maxAbsDiff(want, got)
	assert.LessOrEqual(t, d, 1e-3, "the direct and staged kernels' logits")
	t.Logf("max |logit diff| direct (F16 parts as their own planes) against staged: %.3g", d)
}

// TestOwnPlane: which parts of F16 weights the direct matmul binds as
// their own hi plane, and where: a part from row wRow0 of its binding
// starts 2*wRow0*cols bytes in and spans rowsP rows of cols halves, when
// those rows lie in the binding, the columns are whole steps of 32, the
// start is aligned and the span within the device's range.
func TestOwnPlane(t *testing.T) {
	buf := &vk.Buffer{}
	dm := &directMM{align: 256}
	f16 := batchMat{cols: 2048, dm: dm, halves: true}
	for _, tc := range []struct {
		name         string
		m            batchMat
		pt           matPart
		rowsP, colsP uint32
		lim          uint64
		ok           bool
		offset, size uint64
	}{
		{"q of a 2048+256+256 stack", f16, matPart{buf: buf, wRow0: 0, wRows: 2560, rows: 2048}, 2048, 2048, 1 << 32, true, 0, 2 * 2048 * 2048},
		{"k after it", f16, matPart{buf: buf, wRow0: 2048, wRows: 2560, rows: 256}, 256, 2048, 1 << 32, true, 2 * 2048 * 2048, 2 * 256 * 2048},
		{"v: its padding past the binding", f16, matPart{buf: buf, wRow0: 2304, wRows: 2560, rows: 200}, 384, 2048, 1 << 32, false, 0, 0},
		{"not F16", batchMat{cols: 2048, dm: dm}, matPart{buf: buf, wRows: 2560, rows: 2048}, 2048, 2048, 1 << 32, false, 0, 0},
		{"columns not whole steps", batchMat{cols: 2040, dm: dm, halves: true}, matPart{buf: buf, wRows: 2560, rows: 2048}, 2048, 2048, 1 << 32, false, 0, 0},
		{"start not aligned", batchMat{cols: 32, dm: dm, halves: true}, matPart{buf: buf, wRow0: 3, wRows: 200, rows: 64}, 128, 32, 1 << 32, false, 0, 0},
		{"over the range", f16, matPart{buf: buf, wRows: 2560, rows: 2048}, 2048, 2048, 2*2048*2048 - 1, false, 0, 0},
	} {
		b, ok := tc.m.ownPlane(tc.pt, tc.rowsP, tc.colsP, tc.lim)
		require.Equal(t, tc.ok, ok, tc.name)
		if ok {
			assert.Equal(t, vk.Bind{Buf: buf, Offset: tc.offset, Size: tc.size, Access: vk.Read}, b, tc.name)
		}
	}
}

// TestMatmulDirectResident: with the weights' planes made at load and kept
// (MODRUN_MATMUL_DIRECT=resident), a prefill makes X's planes only (4 a
// block) and no W planes, the planes count among the weights' memory (4
// bytes a weight of Q8_0, 2 of F16 (no lo plane), padded to whole tiles:
// what residentPlanes reports), and the logits are bit for bit those of the
// direct matmul that makes W's planes each time (the same planes, the same
// products).
func TestMatmulDirectResident(t *testing.T) {
	dev, m := timedModel(t, func(b *mod.Block) map[*mod.Mat]gguf.TensorType {
		return map[*mod.Mat]gguf.TensorType{&b.Q: gguf.TypeQ8_0, &b.K: gguf.TypeQ8_0, &b.V: gguf.TypeQ8_0, &b.O: gguf.TypeQ8_0,
			&b.Gate: gguf.TypeQ8_0, &b.Up: gguf.TypeQ8_0,
			&b.Down: gguf.TypeF16} // its 172 columns are no whole Q8_0 blocks
	})
	direct := DeviceProfile(dev.Info())
	direct.MatmulCoop, direct.MatmulCoopEmulate, direct.MatmulDirect, direct.MatmulDirectMin = true, true, true, 0
	resident := direct
	resident.MatmulDirectResident = true
	var logits [2][]float32
	var weights [2]uint64
	for i, p := range []*shaders.Profile{&direct, &resident} {
		var byKernel map[string]ProfileEntry
		var run *Runner
		logits[i], byKernel, run = feedProfiled(t, dev, m, p)
		weights[i] = run.MemoryStats().Weights
		mul := byKernel[shaders.MatmulDirectName(true, true)].Calls
		require.Positive(t, mul)
		wPlanes := byKernel[shaders.PlanesName(shaders.MatvecQ8_0, true)].Calls + byKernel[shaders.PlanesName(shaders.MatvecF16, false)].Calls
		assert.Equal(t, mul/7*4, byKernel[shaders.PlanesName(shaders.MatvecF32, true)].Calls, "%s: X's planes, 4 a block", p)
		if p == &resident {
			assert.Zero(t, wPlanes, "no W planes in a prefill")
			continue
		}
		assert.Equal(t, mul, wPlanes, "W's planes a product")
	}
	c := m.Config
	var want uint64
	for _, rc := range [][2]int{{c.NHead * c.HeadDim, c.NEmbd}, {c.NKVHead * c.HeadDim, c.NEmbd}, {c.NKVHead * c.HeadDim, c.NEmbd},
		{c.NEmbd, c.NHead * c.HeadDim}, {c.NFF, c.NEmbd}, {c.NFF, c.NEmbd}, {c.NEmbd, c.NFF}} {
		rowsP, _, colsP := shaders.MatmulDirectSpecGPU.Pad(uint32(rc[0]), 1, uint32(rc[1]))
		want += shaders.PlanesBytes(rowsP, colsP, rc[1] != c.NFF) // down (F16): hi only
	}
	assert.Equal(t, want*uint64(c.NLayer), weights[1]-weights[0], "the planes among the weights' memory")
	assert.Equal(t, logits[0], logits[1], "the same planes, the same products")
}

// timedModel is the device (tests that need its timestamps skip without
// them) and the trained MoD fixture, its block matrices requantized by
// typeOf where it names a type.
func timedModel(t *testing.T, typeOf func(b *mod.Block) map[*mod.Mat]gguf.TensorType) (*vk.Device, *mod.Model) {
	t.Helper()
	dev := openDevice(t, true)
	if !dev.Info().Timestamps() {
		t.Skipf("%s cannot write timestamps", dev.Info().Name)
	}
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	for l := range m.Weights.Blocks {
		if typeOf == nil {
			break
		}
		for mt, typ := range typeOf(&m.Weights.Blocks[l]) {
			requantize(t, mt, typ)
		}
	}
	return dev, m
}

// feedProfiled feeds prompt (21 tokens from 300) to a new runner of m
// under p with the profile on, and returns the logits, the profile by
// kernel, and the runner (closed with the test).
func feedProfiled(t *testing.T, dev *vk.Device, m *mod.Model, p *shaders.Profile) ([]float32, map[string]ProfileEntry, *Runner) {
	t.Helper()
	prompt := make([]int32, 21)
	for i := range prompt {
		prompt[i] = int32(300 + i)
	}
	run, err := New(dev, m, mod.RoutingRouter, Options{Profile: true, DeviceProfile: p, PromptSteps: -1})
	require.NoError(t, err)
	t.Cleanup(run.Close)
	logits, err := run.Feed(prompt)
	require.NoError(t, err)
	byKernel := map[string]ProfileEntry{}
	for _, e := range run.Profile() {
		byKernel[e.Kernel] = e
	}
	return logits, byKernel, run
}
