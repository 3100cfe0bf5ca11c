package vulkan

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/tokenizer"
	"github.com/modrun/modrun/vk"
	"github.com/modrun/modrun/vk/vktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gpuProfileOf is the profile of a GPU with dev's facts (its subgroups as
// they are: required where the device allows), lavapipe's loop cap kept
// (shaders.GPUProfile).
func gpuProfileOf(dev *vk.Device) shaders.Profile {
	return shaders.GPUProfile(deviceFacts(dev.Info(), nil))
}

// checkRows is how many rows checkProfile reports under prof, counted from
// the profile's own plan (as checkProfile asks it): a matvec of every
// weight type and fusion, two score plans, two routing decisions, and
// decode attention on each cache type, plus its split pass where prof
// splits a 2048-entry cache (AttentionSplits), and the matmul of every
// weight type where prof takes a checked one (the tensor cores' or the
// pipelined tile: MatmulCoop, MatmulPipe), and a batched step's matvec
// where its kernel differs from the decode's (Profile.MatvecBatch at 8
// vectors: matvec_words for F16, Q8_0 and Q4_K on a GPU profile, 12;
// matvec_dot's PREQ variants under MODRUN_MATVEC_DOT=1, with the dot_x
// variants they read, a row each), and
// a prefill's attention at head dimension 128 for each of its 3 caches
// where the profile takes lanes a row (AttentionLanes), and on tensor
// cores at 64 and 128 where it takes them (AttentionCoop, 2), and the
// decode head's argmax_wide where the profile takes it (and its handed-off
// variant with Handoff), and where the profile fuses attention, the
// decode step's fused attention (and its handed-off variant with Handoff)
// and a batched step's paged_attend (and paged_attend_own with
// AttendOwn) on each cache.
// Lavapipe's own profile: 52 + 4 + 2 = 58; a GPU's: 52 + 12 + 4 + 4 + 3 +
// 13 + 1 + 6 = 95 (the pipelined tile, or on an
// NVIDIA GPU the tensor cores; lavapipe's emulated tensor-core product
// takes 150 ms a call there, too slow to time 13 of in CI:
// TestMatmulCoopHiloCheckCase runs their cases untimed).
func checkRows(prof shaders.Profile) (rows, attention, split int) {
	attention = len(shaders.KVTypes)
	if prof.AttentionSplits(2048) > 1 {
		split = len(shaders.KVTypes)
	}
	rows = len(shaders.MatvecTypes)*len(shaders.MatvecFusions) + 2 + 2 + attention + split
	dotx := map[string]bool{} // dot_x's variants the batched PREQ matvecs read: a row each
	for _, typ := range shaders.MatvecTypes {
		for _, fuse := range shaders.MatvecFusions {
			batch, _ := prof.MatvecBatch(typ, fuse, 8, 8, 4096)
			if own, _ := prof.Matvec(typ, fuse, 8, 4096); batch != own {
				rows++
			}
			if strings.Contains(batch, shaders.ReduceSubgroupDot+shaders.MatvecDotPre) {
				dotx[shaders.DotXName(typ, fuse)] = true
			}
		}
	}
	rows += len(dotx)
	if name, _ := prof.AttentionSplit(shaders.KVF16, true, 128); name == shaders.AttentionSplitLanesName(shaders.KVF16, true) {
		rows += 3
	}
	if prof.MatmulCoop || prof.MatmulPipe {
		rows += len(shaders.MatvecTypes)
	}
	for _, hd := range []uint32{64, 128} { // the tensor-core attention (AttentionCoop) at both head dimensions
		if name, _ := prof.AttentionSplit(shaders.KVF16, true, hd); shaders.IsAttentionCoop(name) {
			rows++
		}
	}
	if head := prof.Head(); head[len(head)-1].Variant == "argmax_wide" { // the decode head's argmax and draw
		rows++
		if prof.Handoff {
			rows++
		}
	}
	if prof.FuseAttention { // the fused decode attention (and its handed-off variant) and paged_attend (and paged_attend_own), on both caches
		for _, kv := range shaders.KVTypes {
			rows += 2
			if prof.AttendOwn {
				rows++
			}
			if _, ok := shaders.HandoffName(prof.DecodeAttention(kv, 2048, 128)[0].Variant); ok && prof.Handoff {
				rows++
			}
		}
	}
	return rows, attention + split, split
}

// Every kernel each of deviceProfiles picks (the device's own through
// CheckDevice; a GPU's on the same device: the subgroup kernels, their
// size required, and split attention), and a GPU's with matvec_dot where
// the device has integer dot products (MODRUN_MATVEC_DOT=1: every
// quantized type's decode and batched matvec), passes its check, timed, in the rows
// the profile's plan makes (checkRows).
func TestCheckDevice(t *testing.T) {
	dev := openDevice(t, true)
	cases := deviceProfiles(dev)
	if dev.Info().Features.IntegerDotProduct && dev.Info().Features.SubgroupArithmetic {
		dot := shaders.GPUProfile(deviceFacts(dev.Info(), Knobs{"MODRUN_MATVEC_DOT": "1"}))
		require.True(t, dot.MatvecDot, "a GPU profile with MODRUN_MATVEC_DOT=1: %s", dot)
		cases = append(cases, profileCase{"gpu-dot", &dot})
	}
	for _, pc := range cases {
		t.Run(pc.name, func(t *testing.T) {
			check := func() ([]SelfCheck, error) { return checkProfile(dev, *pc.prof) }
			if pc.name == "own" {
				check = func() ([]SelfCheck, error) { return CheckDevice(dev) } // modrun devices --check
			}
			checks, err := check()
			require.NoError(t, err)
			subgroups, split, dots, dotx := 0, 0, 0, 0
			for _, c := range checks {
				assert.True(t, c.Pass, "%s %s: worst %.3g of its bound; %s", c.Op, c.Variant(), c.Worst, c.Err)
				assert.Positive(t, c.USPerCall, c.Variant())
				if strings.Contains(c.Kernel, "_sg") {
					subgroups++
				}
				if strings.HasPrefix(c.Kernel, "decode_attention_split") {
					split++
				}
				if strings.Contains(c.Kernel, shaders.ReduceSubgroupDot) {
					dots++
				}
				if strings.HasPrefix(c.Kernel, "dot_x") {
					dotx++
				}
			}
			if pc.prof.MatvecDot {
				assert.Equal(t, 2*len(shaders.MatvecDotTypes)*len(shaders.MatvecFusions), dots,
					"every quantized type's decode matvec and batched step's, every fusion, on matvec_dot")
				assert.Equal(t, 4, dotx, "dot_x in blocks of 32 and 256, with the norm's weight and without: what the batched steps' matvec_dot reads")
			}
			rows, _, wantSplit := checkRows(*pc.prof)
			assert.Len(t, checks, rows, "every matvec, two score plans, two decisions, attention on two caches (and split where %s splits)", pc.prof)
			assert.Equal(t, wantSplit, split, "split attention on both caches where the profile splits")
			if pc.prof.MatvecReduce == shaders.ReduceSubgroup {
				assert.Positive(t, subgroups, "the profile's subgroup kernels were checked")
			}
			for _, c := range checks[:3] {
				t.Logf("%-24s %-40s pass=%v %.1f us", c.Op, c.Variant(), c.Pass, c.USPerCall)
			}
		})
	}
	gpu := gpuProfileOf(dev)
	require.Positive(t, gpu.AttentionSplits(2048)-1, "a GPU profile splits a 2048-entry cache")
	if dev.Info().Features.SubgroupArithmetic {
		require.Equal(t, shaders.ReduceSubgroup, gpu.MatvecReduce, "a GPU profile on a device with subgroup arithmetic takes the subgroup matvec")
	}
}

// The self-check catches a variant that is wrong on this device: a profile
// that claims every dispatch gets subgroups of 16 (the device's are 8, and
// nothing requires 16), as a driver whose report is wrong would. Its
// subgroup matvecs take rows of 16 lanes that the device runs as 8: rows
// are skipped and summed twice. The check fails them, says so in one line
// each, and the runner falls back to the shared-memory matvec; the greedy
// story is then the CPU reference's, token for token. The score kernels
// read the size at run time (gl_SubgroupSize), so 16 is only a multiple
// of the size they get: they pass and are kept.
func TestSelfCheckCatchesWrongSubgroupSize(t *testing.T) {
	dev := openDevice(t, true)
	info := dev.Info()
	if !info.Features.SubgroupArithmetic || info.Limits.SubgroupSize != 8 {
		t.Skipf("the test fakes 16 on a device with subgroups of 8 (lavapipe); this one has %d", info.Limits.SubgroupSize)
	}
	d := deviceFacts(info, nil)
	d.CPU, d.SubgroupSize, d.RequireSubgroupSize = false, 16, false
	liar := shaders.NewProfile(d)
	liar.LoopCap = shaders.LavapipeLoopIterations
	require.Equal(t, shaders.ReduceSubgroup, liar.MatvecReduce)

	m := openModel(t, "../../models/tinystories-mod.gguf")
	var log bytes.Buffer
	run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &liar, KVType: "f32", SelfCheckLog: &log})
	require.NoError(t, err)
	defer run.Close()
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	require.NotEmpty(t, log.String(), "the self-check reported the failing matvecs")
	for _, l := range lines {
		assert.Regexp(t, `^modrun: self-check: kernel matvec_\w+_sg\w*\[\d+ 16 1( \d+)?\] fails on device `+regexp.QuoteMeta(info.Name)+
			` \([\d.e+]+ times its tolerance off the CPU\): using matvec_\w+$`, l)
	}
	t.Logf("%s", log.String())
	assert.Equal(t, shaders.ReduceShared, run.ks.prof.MatvecReduce, "matvec fell back")
	assert.True(t, run.ks.prof.SubgroupArithmetic, "the score kernels, right at 16, were kept")
	for key := range run.ks.made {
		assert.NotContains(t, key, "matvec_q8_0_sg", "no subgroup matvec in the rebuilt graph")
	}

	tk, err := tokenizer.FromGGUF(m.File)
	require.NoError(t, err)
	prompt, err := tk.Encode("Once upon a time", true)
	require.NoError(t, err)
	cpu, err := m.NewState(mod.RoutingRouter)
	require.NoError(t, err)
	greedy := func(feed func([]int32) ([]float32, error)) []int32 {
		logits, err := feed(prompt)
		require.NoError(t, err)
		var ids []int32
		for len(ids) < 24 {
			ids = append(ids, stats.Argmax(logits))
			logits, err = feed(ids[len(ids)-1:])
			require.NoError(t, err)
		}
		return ids
	}
	want := greedy(func(toks []int32) ([]float32, error) { return cpu.Forward(toks, false) })
	got := greedy(run.Feed)
	wantText, err := tk.Decode(want)
	require.NoError(t, err)
	gotText, err := tk.Decode(got)
	require.NoError(t, err)
	assert.Equal(t, string(wantText), string(gotText), "the greedy story after the fallback")
	t.Logf("greedy: %q", gotText)
}

// Each (device, variant) is checked once per process: a second model on
// the same device runs no check again.
func TestSelfCheckCached(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	run := newRunner(t, dev, m, mod.RoutingRouter)
	checked := 0
	for _, k := range run.ks.made {
		if _, ok := checkerFor(k.v); ok {
			checked++
		}
	}
	assert.Positive(t, checked, "the graph has checked kernels")
	runs := func() int {
		checkCache.Lock()
		defer checkCache.Unlock()
		return checksRun
	}
	before := runs()
	again := newRunner(t, dev, m, mod.RoutingRouter)
	assert.Equal(t, before, runs(), "no check ran again")
	assert.Equal(t, run.ks.prof, again.ks.prof)
}

// On the smallest device of the forced matrix (no optional feature, 16 KiB
// of shared memory, 256 invocations) every variant each of deviceProfiles
// picks passes too, the attention workgroup halved to fit, in each of the
// attention rows the profile's plan makes (checkRows).
func TestCheckDeviceMinimal(t *testing.T) {
	var minimal vktest.Restriction
	for _, fd := range forcedDevices {
		if fd.name == "minimal" {
			minimal = fd.r
		}
	}
	dev := vktest.OpenRestricted(t, vk.InstanceOptions{Validation: true}, minimal)
	for _, pc := range deviceProfiles(dev) {
		t.Run(pc.name, func(t *testing.T) {
			checks, err := checkProfile(dev, *pc.prof)
			require.NoError(t, err)
			fitted := 0
			for _, c := range checks {
				assert.True(t, c.Pass, "%s %s: worst %.3g of its bound; %s", c.Op, c.Variant(), c.Worst, c.Err)
				assert.NotContains(t, c.Kernel, "_sg", "no subgroup kernel without subgroup arithmetic")
				if strings.HasPrefix(c.Kernel, "decode_attention") {
					assert.Equal(t, []uint32{16, 128}, c.Spec[:2], c.Kernel)
					fitted++
				}
			}
			rows, attention, _ := checkRows(*pc.prof)
			assert.Len(t, checks, rows)
			assert.Equal(t, attention, fitted, "attention on two caches, and split where %s splits", pc.prof)
		})
	}
}

// The tensor-core matmul's self-check case, run with the emulated product
// on lavapipe (which has no cooperative matrices): its input, reference,
// bound and dispatch are right, at the prefill and the few-row tiles, so a
// failure on a GPU is the tensor-core product's. The case also fails a
// kernel that skips a token tile (a dispatch one workgroup short).
func TestMatmulCoopCheckCase(t *testing.T) {
	dev := openDevice(t, true)
	prof := DeviceProfile(dev.Info())
	ks := newKernels(dev, &prof, nil)
	defer ks.Close()
	for _, typ := range []string{shaders.MatvecF16, shaders.MatvecQ8_0, shaders.MatvecQ4_K} {
		real, err := shaders.Lookup(shaders.MatmulCoopName(typ, false))
		require.NoError(t, err)
		for _, spec := range [][]uint32{shaders.MatmulCoopSpecGPU.Constants(), shaders.MatmulCoopSpecFew.Constants()} {
			k, err := ks.get(shaders.MatmulCoopName(typ, true), spec)
			require.NoError(t, err)
			c, err := matmulCase(real, spec)
			require.NoError(t, err)
			worst, _, err := runCheck(dev, k, c, false)
			require.NoError(t, err)
			assert.LessOrEqual(t, worst, 1.0, "%s %v", typ, spec)
			c.groups[1]-- // the last token tile left out
			worst, _, err = runCheck(dev, k, c, false)
			require.NoError(t, err)
			assert.Greater(t, worst, 1.0, "%s %v: a skipped tile passed", typ, spec)
		}
	}
}

// The hilo tensor-core matmul's self-check case (matmul_coop_hilo, the
// default on tensor cores), with the emulated products on lavapipe: the
// hilo kernel passes it at f32's bound, and the f16-operand kernel, what a
// compiler that folded the split away would run, fails it, so a device
// that loses the precision falls back instead of passing.
func TestMatmulCoopHiloCheckCase(t *testing.T) {
	dev := openDevice(t, true)
	prof := DeviceProfile(dev.Info())
	ks := newKernels(dev, &prof, nil)
	defer ks.Close()
	for _, typ := range []string{shaders.MatvecF16, shaders.MatvecQ8_0, shaders.MatvecQ4_K, shaders.MatvecBF16} {
		real, err := shaders.Lookup(shaders.MatmulCoopHiloName(typ, false))
		require.NoError(t, err)
		for _, spec := range [][]uint32{shaders.MatmulCoopSpecGPU.Constants(), shaders.MatmulCoopSpecFew.Constants()} {
			c, err := matmulCase(real, spec)
			require.NoError(t, err)
			hilo, err := ks.get(shaders.MatmulCoopHiloName(typ, true), spec)
			require.NoError(t, err)
			worst, _, err := runCheck(dev, hilo, c, false)
			require.NoError(t, err)
			assert.LessOrEqual(t, worst, 1.0, "%s %v: the hilo kernel", typ, spec)
			t.Logf("%s %v: hilo %.3g of the bound", typ, spec, worst)
			half, err := ks.get(shaders.MatmulCoopName(typ, true), spec)
			require.NoError(t, err)
			worst, _, err = runCheck(dev, half, c, false)
			require.NoError(t, err)
			assert.Greater(t, worst, 1.0, "%s %v: the f16-operand kernel passed the hilo case", typ, spec)
			t.Logf("%s %v: f16 operands %.3g of the bound", typ, spec, worst)
		}
	}
}

// MODRUN_TENSOR_CORES: unset and 1 the hilo tensor-core matmul where the
// device has it, 0 none, f16 the f16-operand kernel; anything else is
// refused by name when a runner opens.
func TestTensorCoresEnv(t *testing.T) {
	for _, tc := range []struct {
		v        string
		on, half bool
	}{{"", true, false}, {"1", true, false}, {"0", false, false}, {"f16", true, true}} {
		t.Setenv("MODRUN_TENSOR_CORES", tc.v)
		on, half, err := tensorCoresEnv(nil)
		require.NoError(t, err, tc.v)
		assert.Equal(t, []bool{tc.on, tc.half}, []bool{on, half}, "%q", tc.v)
	}
	dev := openDevice(t, false)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	t.Setenv("MODRUN_TENSOR_CORES", "yes")
	_, err := New(dev, m, mod.RoutingRouter, Options{})
	assert.ErrorContains(t, err, `MODRUN_TENSOR_CORES="yes"`)
}

// MODRUN_MATMUL_PIPE: unset or 1 keeps the pipelined tile where a GPU
// profile allows it, 0 takes the tiles before it (the device's facts say
// so), anything else is refused by name when a runner opens.
func TestMatmulPipeEnv(t *testing.T) {
	dev := openDevice(t, false)
	for _, tc := range []struct {
		v  string
		on bool
	}{{"", true}, {"1", true}, {"0", false}} {
		t.Setenv("MODRUN_MATMUL_PIPE", tc.v)
		on, err := matmulPipeEnv(nil)
		require.NoError(t, err, tc.v)
		assert.Equal(t, tc.on, on, "%q", tc.v)
		gpu := shaders.GPUProfile(deviceFacts(dev.Info(), nil))
		assert.Equal(t, tc.on, gpu.MatmulPipe, "%q: the GPU profile on this device (its limits hold the tile)", tc.v)
		if dev.Info().Type == vk.CPU {
			assert.False(t, DeviceProfile(dev.Info()).MatmulPipe, "%q: a CPU device's own profile keeps its tiles", tc.v)
		} else {
			assert.Equal(t, tc.on, DeviceProfile(dev.Info()).MatmulPipe, "%q: a GPU's own profile", tc.v)
		}
	}
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	t.Setenv("MODRUN_MATMUL_PIPE", "on")
	_, err := New(dev, m, mod.RoutingRouter, Options{})
	assert.ErrorContains(t, err, `MODRUN_MATMUL_PIPE="on"`)
}

// The direct matmul's self-check case (matmul_direct's product over planes
// of halves), with the emulated product on lavapipe: the hilo product
// passes its case at f32's bound and the f16 product its own, the f16
// product fails the hilo case (a device that drops the low halves falls
// back), and a dispatch one token tile short fails either, so a failure on
// a GPU is the tensor-core product's or its tile loads'.
func TestMatmulDirectCheckCase(t *testing.T) {
	dev := openDevice(t, true)
	prof := DeviceProfile(dev.Info())
	ks := newKernels(dev, &prof, nil)
	defer ks.Close()
	for _, spec := range []shaders.MatmulDirectSpec{shaders.MatmulDirectSpecGPU, {BM: 16, BN: 32, WM: 16, WN: 16}} {
		for _, hilo := range []bool{false, true} {
			real, err := shaders.Lookup(shaders.MatmulDirectName(hilo, false))
			require.NoError(t, err)
			c, err := directCase(real, spec.Constants())
			require.NoError(t, err)
			k, err := ks.get(shaders.MatmulDirectName(hilo, true), spec.Constants())
			require.NoError(t, err)
			worst, _, err := runCheck(dev, k, c, false)
			require.NoError(t, err)
			assert.LessOrEqual(t, worst, 1.0, "%+v hilo=%v", spec, hilo)
			t.Logf("%+v hilo=%v: %.3g of the bound", spec, hilo, worst)
			if hilo {
				half, err := ks.get(shaders.MatmulDirectName(false, true), spec.Constants())
				require.NoError(t, err)
				worst, _, err = runCheck(dev, half, c, false)
				require.NoError(t, err)
				assert.Greater(t, worst, 1.0, "%+v: the f16 product passed the hilo case", spec)
			}
			c.groups[1]-- // the last token tile left out
			worst, _, err = runCheck(dev, k, c, false)
			require.NoError(t, err)
			assert.Greater(t, worst, 1.0, "%+v hilo=%v: a skipped tile passed", spec, hilo)
		}
	}
}

// MODRUN_COOPMAT: unset or nv keeps NV's tensor-core kernels on a device
// with both extensions, khr takes the KHR extension's (a device with only
// one takes it either way), anything else is refused by name when a runner
// opens.
func TestCoopMatEnv(t *testing.T) {
	dev := openDevice(t, false)
	for _, tc := range []struct {
		v   string
		khr bool
	}{{"", false}, {"nv", false}, {"khr", true}} {
		t.Setenv("MODRUN_COOPMAT", tc.v)
		khr, err := coopMatEnv(nil)
		require.NoError(t, err, tc.v)
		assert.Equal(t, tc.khr, khr, "%q", tc.v)
		facts := deviceFacts(dev.Info(), nil)
		assert.Equal(t, tc.khr, facts.CoopMatKHR, "%q", tc.v)
		facts.CPU, facts.SubgroupSize, facts.TensorCores = false, shaders.MatmulCoopSubgroup, true
		facts.CooperativeMatrixNV, facts.CooperativeMatrixKHR = true, true
		p := shaders.NewProfile(facts)
		assert.True(t, p.MatmulCoop, "%q", tc.v)
		assert.Equal(t, tc.khr, p.MatmulCoopKHR, "%q: a GPU with both", tc.v)
		facts.CooperativeMatrixNV = false
		p = shaders.NewProfile(facts)
		assert.True(t, p.MatmulCoop && p.MatmulCoopKHR, "%q: a GPU with KHR's only", tc.v)
		facts.CooperativeMatrixNV, facts.CooperativeMatrixKHR = true, false
		p = shaders.NewProfile(facts)
		assert.True(t, p.MatmulCoop && !p.MatmulCoopKHR, "%q: a GPU with NV's only", tc.v)
	}
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	t.Setenv("MODRUN_COOPMAT", "amd")
	_, err := New(dev, m, mod.RoutingRouter, Options{})
	assert.ErrorContains(t, err, `MODRUN_COOPMAT="amd"`)
}

// MODRUN_MATMUL_DIRECT: unset or 0 keeps the staged tensor-core matmul, 1
// takes the direct one where the device runs the tensor-core matmul (the
// device's facts say so; a device without it is unchanged), resident the
// same with the weights' planes kept, anything else is refused by name
// when a runner opens.
func TestMatmulDirectEnv(t *testing.T) {
	dev := openDevice(t, false)
	for _, tc := range []struct {
		v            string
		on, resident bool
	}{{"", false, false}, {"0", false, false}, {"1", true, false}, {"resident", true, true}} {
		t.Setenv("MODRUN_MATMUL_DIRECT", tc.v)
		on, resident, err := matmulDirectEnv(nil)
		require.NoError(t, err, tc.v)
		assert.Equal(t, [2]bool{tc.on, tc.resident}, [2]bool{on, resident}, "%q", tc.v)
		facts := deviceFacts(dev.Info(), nil)
		assert.Equal(t, [2]bool{tc.on, tc.resident}, [2]bool{facts.MatmulDirect, facts.MatmulDirectResident}, "%q", tc.v)
		facts.CPU, facts.CooperativeMatrixNV, facts.SubgroupSize, facts.TensorCores = false, true, shaders.MatmulCoopSubgroup, true
		p := shaders.NewProfile(facts)
		assert.Equal(t, [2]bool{tc.on, tc.resident}, [2]bool{p.MatmulDirect, p.MatmulDirectResident}, "%q: a GPU with tensor cores", tc.v)
		facts.CooperativeMatrixNV = false
		p = shaders.NewProfile(facts)
		assert.False(t, p.MatmulDirect || p.MatmulDirectResident, "%q: a GPU without them", tc.v)
	}
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	t.Setenv("MODRUN_MATMUL_DIRECT", "yes")
	_, err := New(dev, m, mod.RoutingRouter, Options{})
	assert.ErrorContains(t, err, `MODRUN_MATMUL_DIRECT="yes"`)
}
