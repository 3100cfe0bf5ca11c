package vulkan

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// The self-check at load (DESIGN.md §6): when a model opens on a device,
// each kernel variant its graph made that depends on the device (the
// matvecs, whose reduction and specialization come from the subgroup size
// and limits, the router score and routing decision kernels, and decode
// attention, whose workgroup fits the shared memory) runs once
// on a small input and is compared with the CPU within the kernel's stated
// tolerance. A variant that fails (a driver that reports a subgroup size
// its dispatches do not get; a miscompile) switches its op to the safe
// variant (shaders.Profile.Fallback), with one line to the log naming
// kernel, device and fallback, and the graph is built again. Each (device,
// variant, specialization) is checked once per process: the results are
// cached, so opening a model again costs nothing.

// SelfCheck is one kernel variant's check on one device.
type SelfCheck struct {
	Op       string   `json:"op"`                 // what it computes: "matvec q4_k norm", "router score", ...
	Kernel   string   `json:"kernel"`             // the variant
	Spec     []uint32 `json:"spec"`               // its specialization constants
	Subgroup uint32   `json:"subgroup,omitempty"` // the subgroup size its pipeline requires; 0: none
	Pass     bool     `json:"pass"`
	// Worst is the largest |GPU - CPU| over its bound, over every output
	// (a pass is <= 1); Err says why the kernel could not run at all.
	Worst float64 `json:"worst"`
	Err   string  `json:"error,omitempty"`
	// USPerCall is the time of one call, from a timed replay (CheckDevice
	// only; 0 at load).
	USPerCall float64 `json:"us_per_call,omitempty"`
}

// Variant names the kernel with its specialization, as the checks table shows it.
func (c SelfCheck) Variant() string {
	s := fmt.Sprintf("%s%v", c.Kernel, c.Spec)
	if c.Subgroup != 0 {
		s += fmt.Sprintf(" subgroup %d", c.Subgroup)
	}
	return s
}

// checkTol is the bound of a checked output relative to the absolute sum of
// the terms it adds: the GPU sums in another order than the CPU (in
// subgroups or a tree), whose rounding differs by up to about n*eps of that
// sum (n = 512 terms: 3e-5). A wrong subgroup size loses or doubles terms
// and is off by the size of a term.
const checkTol = 1e-4

// checkCache holds every check this process ran, by device and variant.
var checkCache = struct {
	sync.Mutex
	m map[string]SelfCheck
}{m: map[string]SelfCheck{}}

// checksRun counts the checks actually run (not from the cache), for tests.
var checksRun int

func deviceKey(info vk.DeviceInfo) string {
	return fmt.Sprintf("%d|%s|%04x:%04x|%s|%s|%v|%v", info.Index, info.Name, info.VendorID, info.DeviceID, info.DriverInfo,
		info.APIVersion, info.Limits, info.Features)
}

// check runs (or finds in the cache) the check of kernel k, made by ks;
// ok is false when no check exists for its variant.
func (ks *kernels) check(k *kernel, timed bool) (SelfCheck, bool) {
	mk, ok := checkerFor(k.v)
	if !ok {
		return SelfCheck{}, false
	}
	key := fmt.Sprint(deviceKey(ks.dev.Info()), "|", k.v.Name, k.spec, ks.prof.RequiredSubgroupSize(k.v), timed)
	checkCache.Lock()
	defer checkCache.Unlock()
	if c, ok := checkCache.m[key]; ok {
		return c, true
	}
	checksRun++
	c := SelfCheck{Op: checkOp(k.v), Kernel: k.v.Name, Spec: k.spec, Subgroup: ks.prof.RequiredSubgroupSize(k.v)}
	cs, err := mk(k.v, k.spec)
	var worst, us float64
	if err == nil {
		worst, us, err = runCheck(ks.dev, k, cs, timed)
	}
	if err != nil {
		c.Err = err.Error()
	} else {
		c.Worst, c.Pass, c.USPerCall = worst, worst <= 1, us
	}
	checkCache.m[key] = c
	return c, true
}

// selfCheck checks every kernel ks has made that has a check, and returns
// the profile to build with again when one failed (nil when all passed):
// each failing kernel's op switched to its safe variant, with a line to log
// (nil: os.Stderr) for each. A failing kernel with nothing to fall back to
// is an error.
func (ks *kernels) selfCheck(log io.Writer) (*shaders.Profile, error) {
	if log == nil {
		log = os.Stderr
	}
	keys := make([]string, 0, len(ks.made))
	for key := range ks.made {
		keys = append(keys, key)
	}
	slices.Sort(keys) // the same order, so the same lines, every time
	fb, changed := ks.prof, false
	for _, key := range keys {
		k := ks.made[key]
		c, ok := ks.check(k, false)
		if !ok || c.Pass {
			continue
		}
		why := c.Err
		if why == "" {
			why = fmt.Sprintf("%.3g times its tolerance off the CPU", c.Worst)
		}
		next, safe, ok := fb.Fallback(k.v)
		if !ok {
			return nil, fmt.Errorf("vulkan: self-check: kernel %s fails on device %s (%s), and it has no safer variant: use --backend cpu, "+
				"and please report `modrun devices --check`", c.Variant(), ks.dev.Info().Name, why)
		}
		fmt.Fprintf(log, "modrun: self-check: kernel %s fails on device %s (%s): using %s\n", c.Variant(), ks.dev.Info().Name, why, safe)
		fb, changed = next, true
	}
	if !changed {
		return nil, nil
	}
	return &fb, nil
}

// checkBuf is one binding of a check: its initial contents and, for an
// output, what it must hold after the dispatch: words exactly (wantU32,
// from the first), and floats within bound (want, from word floatsAt).
type checkBuf struct {
	data     []byte
	want     []float32
	bound    []float64
	wantU32  []uint32
	floatsAt int
}

// checkCase is one dispatch of a kernel on a small input, with the CPU's
// results for it.
type checkCase struct {
	op     string
	push   any
	groups [3]uint32
	bufs   []checkBuf // one per binding, in binding order
}

// runCheck runs c on k once and returns the worst |GPU - CPU| over its
// bound; timed, it then replays the dispatch to time a call.
func runCheck(dev *vk.Device, k *kernel, c checkCase, timed bool) (worst, us float64, err error) {
	bufs := make([]*vk.Buffer, len(c.bufs))
	defer func() {
		for _, b := range bufs {
			b.Close()
		}
	}()
	binds := make([]vk.Bind, len(c.bufs))
	for i, cb := range c.bufs {
		if bufs[i], err = dev.NewBuffer(uint64(max(len(cb.data), 4)), vk.HostVisible); err != nil {
			return 0, 0, err
		}
		if err = bufs[i].Upload(cb.data, 0); err != nil {
			return 0, 0, err
		}
		binds[i] = vk.Bind{Buf: bufs[i], Access: vk.Access(k.v.Bindings[i].Access)}
	}
	push := vk.MustPackPush(c.push)
	rec := dev.NewRecorder()
	defer rec.Close()
	rec.Dispatch(k.k, push, c.groups, binds...)
	if err := dev.Run(rec); err != nil {
		return 0, 0, err
	}
	for i, cb := range c.bufs {
		if cb.want == nil && cb.wantU32 == nil {
			continue
		}
		got := make([]byte, len(cb.data))
		if err := bufs[i].Download(got, 0); err != nil {
			return 0, 0, err
		}
		for j, w := range cb.want {
			g := math.Float32frombits(binary.LittleEndian.Uint32(got[4*(cb.floatsAt+j):]))
			d := math.Abs(float64(g)-float64(w)) / cb.bound[j]
			if math.IsNaN(d) {
				d = math.Inf(1)
			}
			worst = max(worst, d)
		}
		for j, w := range cb.wantU32 {
			if binary.LittleEndian.Uint32(got[4*j:]) != w {
				worst = math.Inf(1)
			}
		}
	}
	if timed {
		us, err = timeDispatch(dev, k, push, c.groups, binds)
	}
	return worst, us, err
}

// timeDispatch is the wall time of one call of a dispatch, from replays of
// a recording of callsPerRun of them (the results are not looked at: an
// accumulating kernel accumulates): the device's whole cost of a call, its
// barrier included, with a submit's cost spread over the calls.
func timeDispatch(dev *vk.Device, k *kernel, push []byte, groups [3]uint32, binds []vk.Bind) (float64, error) {
	const callsPerRun, runs = 16, 3
	rec := dev.NewRecorder()
	defer rec.Close()
	for i := 0; i < callsPerRun; i++ {
		rec.Dispatch(k.k, push, groups, binds...)
	}
	if err := dev.Run(rec); err != nil { // the first run builds the command buffer
		return 0, err
	}
	start := time.Now()
	for i := 0; i < runs; i++ {
		if err := dev.Run(rec); err != nil {
			return 0, err
		}
	}
	return float64(time.Since(start).Microseconds()) / (callsPerRun * runs), nil
}

// CheckDevice is `modrun devices --check`: every kernel variant the
// device's profile picks for a model's decode (matvec of every weight type
// and fusion, the router score and the routing decision with and without
// a predictor, decode attention on F32 and F16 caches, split when the
// profile splits, and fused where it fuses, with a batched step's fused
// attention; the tensor-core matmul where the profile has it),
// checked against the CPU and timed.
func CheckDevice(dev *vk.Device) ([]SelfCheck, error) {
	prof := DeviceProfile(dev.Info())
	if err := handoffEnv(&prof, nil); err != nil {
		return nil, err
	}
	return checkProfile(dev, prof)
}

// pick is a kernel a profile picks: a variant and its spec (nil: the
// variant's), and what for.
type pick struct {
	name, use string
	spec      []uint32
}

// profilePicks are the kernels checkProfile checks under prof.
func profilePicks(prof shaders.Profile) []pick {
	var picks []pick
	for _, typ := range shaders.MatvecTypes {
		for _, fuse := range shaders.MatvecFusions {
			name, spec := prof.Matvec(typ, fuse, 1, 4096)
			picks = append(picks, pick{name, "decode", spec})
		}
	}
	var dotx []string
	for _, typ := range shaders.MatvecTypes { // a batched step's, where it differs: 8 vectors a pass
		for _, fuse := range shaders.MatvecFusions {
			name, spec := prof.MatvecBatch(typ, fuse, 8, 8, 4096)
			if own, _ := prof.Matvec(typ, fuse, 8, 4096); name != own {
				picks = append(picks, pick{name, "batched step of 8", spec})
			}
			if dx, ok := shaders.MatvecDotPreX(name); ok && !slices.Contains(dotx, dx) {
				dotx = append(dotx, dx)
			}
		}
	}
	for _, dx := range dotx { // what the PREQ matvecs read
		picks = append(picks, pick{dx, "batched step: x quantized once", nil})
	}
	if prof.Handoff { // the decode step's matvecs that hand off (handoff.go)
		for _, typ := range shaders.HandoffMatvecTypes {
			for _, fuse := range shaders.MatvecFusions { // those with a handoff variant
				name, spec := prof.Matvec(typ, fuse, 1, 4096)
				if h, ok := shaders.HandoffName(name); ok {
					picks = append(picks, pick{h, "decode, handed off", spec})
				}
			}
		}
	}
	for _, n := range []uint32{1, 64} { // the decode score; the predictor's hidden layer
		plan := prof.Score(n, 1, 4096)
		picks = append(picks, pick{plan.Variant, "router score", plan.Spec})
	}
	for _, pred := range []bool{false, true} {
		name, spec := prof.RouteDecode(pred)
		picks = append(picks, pick{name, "routing decision", spec})
	}
	for _, kv := range shaders.KVTypes { // ks.get fits the workgroup to the device
		picks = append(picks, pick{shaders.DecodeAttentionName(kv), "decode attention", nil})
		if splits := prof.AttentionSplits(2048); splits > 1 {
			picks = append(picks, pick{shaders.DecodeAttentionSplitName(kv), "decode attention, split", shaders.DecodeAttentionSplitSpec(splits)})
		}
	}
	if prof.FuseAttention { // the fused attentions at Llama 2's head dimension: the decode step's, and a batched step's
		for _, kv := range shaders.KVTypes {
			st := prof.DecodeAttention(kv, 2048, 128)[0]
			picks = append(picks, pick{st.Variant, "decode attention, fused", st.Spec})
			if h, ok := shaders.HandoffName(st.Variant); ok && prof.Handoff {
				picks = append(picks, pick{h, "decode attention, fused, handed off", st.Spec})
			}
			picks = append(picks, pick{shaders.PagedAttendName(kv), "batched step attention", shaders.PagedAttentionSpec(128)})
			if prof.AttendOwn {
				picks = append(picks, pick{shaders.PagedAttendOwnName(kv), "batched step attention, rows each their sequence's only one", shaders.PagedAttentionSpec(128)})
			}
		}
	}
	if prof.AttentionLanes { // a prefill's attention at Llama's head dimension, lanes a row where the profile takes them
		for _, c := range []struct {
			kv     shaders.KV
			counts bool
		}{{shaders.KVF32, false}, {shaders.KVF32, true}, {shaders.KVF16, true}} {
			if name, spec := prof.AttentionSplit(c.kv, c.counts, 128); name == shaders.AttentionSplitLanesName(c.kv, c.counts) {
				picks = append(picks, pick{name, "prefill attention", spec})
			}
		}
	}
	if prof.AttentionCoop { // the prefill's attention on tensor cores (MODRUN_ATTENTION_COOP=1), at both of Llama's head dimensions
		for _, hd := range []uint32{64, 128} {
			if name, spec := prof.AttentionSplit(shaders.KVF16, true, hd); shaders.IsAttentionCoop(name) {
				picks = append(picks, pick{name, fmt.Sprintf("prefill attention, head dim %d", hd), spec})
			}
		}
	}
	if prof.MatmulCoop || prof.MatmulPipe { // the tensor-core matmul, or the pipelined tile
		for _, typ := range shaders.MatvecTypes {
			name, spec := prof.MatmulKernel(typ)
			picks = append(picks, pick{name, "prefill matmul", spec})
		}
	}
	if head := prof.Head(); head[len(head)-1].Variant == "argmax_wide" { // the decode head's argmax and draw
		st := head[len(head)-1]
		picks = append(picks, pick{st.Variant, "decode head", st.Spec})
		if h, ok := shaders.HandoffName(st.Variant); ok && prof.Handoff {
			picks = append(picks, pick{h, "decode head, handed off", st.Spec})
		}
	}
	if prof.MatmulDirect { // and its direct product over planes (MODRUN_MATMUL_DIRECT=1)
		dk := prof.MatmulDirectKernels(shaders.MatvecF32)
		picks = append(picks, pick{dk.Product, "prefill matmul, direct", dk.Spec.Constants()})
	}
	return picks
}

// checkProfile is CheckDevice with profile prof.
func checkProfile(dev *vk.Device, prof shaders.Profile) ([]SelfCheck, error) {
	ks := newKernels(dev, &prof, nil)
	defer ks.Close()
	var out []SelfCheck
	for _, p := range profilePicks(prof) {
		k, err := ks.get(p.name, p.spec)
		if err != nil {
			v, _ := shaders.Lookup(p.name) // the zero Variant when there is none: checkOp names it
			out = append(out, SelfCheck{Op: checkOp(v), Kernel: p.name, Spec: p.spec, Err: err.Error()})
			continue
		}
		c, _ := ks.check(k, true)
		out = append(out, c)
	}
	return out, nil
}

// KernelStats is a kernel the device's profile picks with its driver's
// compiler statistics (vk.Kernel.Statistics): registers, spills,
// instructions, occupancy, as the driver names them.
type KernelStats struct {
	Kernel string               `json:"kernel"`
	Spec   []uint32             `json:"spec"`
	Use    string               `json:"use"` // "decode", "batched step of 16", "prefill matmul"
	Stats  []vk.KernelStatistic `json:"stats,omitempty"`
	Err    string               `json:"error,omitempty"`
}

// KernelStatistics is `modrun devices --kernel-stats`: CheckDevice's kernels,
// and a batched step's matvecs at 16 vectors, compiled on dev (opened from
// an instance with vk.InstanceOptions.KernelStatistics) with what its
// compiler reports of each. Nothing runs: RADV's null device (RADV_FORCE_
// FAMILY) answers for an AMD GPU that is not there.
func KernelStatistics(dev *vk.Device) ([]KernelStats, error) {
	if !dev.Info().Features.PipelineExecutableInfo {
		return nil, fmt.Errorf("vulkan: device %d (%s) does not report kernel statistics (VK_KHR_pipeline_executable_properties)", dev.Info().Index, dev.Info().Name)
	}
	prof := DeviceProfile(dev.Info())
	if err := handoffEnv(&prof, nil); err != nil {
		return nil, err
	}
	ks := newKernels(dev, &prof, nil)
	defer ks.Close()
	picks := profilePicks(prof)
	for _, typ := range shaders.MatvecTypes {
		for _, fuse := range shaders.MatvecFusions {
			name, spec := prof.MatvecBatch(typ, fuse, 16, 16, 4096)
			picks = append(picks, pick{name, "batched step of 16", spec})
		}
	}
	// Attention at both head dimensions modrun's models have (64: TinyLlama,
	// stories15M; 128: Llama 2 7B, Llama 3): the prefill's, whose registers
	// hold a query row and its accumulator (docs/decode-attention-cost.md),
	// and the fused decode attention where the profile fuses it.
	for _, hd := range []uint32{64, 128} {
		for _, kv := range shaders.KVTypes {
			name, spec := prof.AttentionSplit(kv, true, hd)
			picks = append(picks, pick{name, fmt.Sprintf("prefill attention, head dim %d", hd), spec})
			if prof.FuseAttention && prof.AttendKeys {
				picks = append(picks, pick{shaders.DecodeAttendKeysName(kv), fmt.Sprintf("decode attention, fused, head dim %d", hd),
					shaders.DecodeAttendKeysSpec(hd, prof.AttentionSplits(2048))})
			}
		}
	}
	var out []KernelStats
	seen := map[string]bool{}
	for _, p := range picks {
		key := fmt.Sprint(p.name, p.spec)
		if seen[key] {
			continue // the fused decode attention at 128: a check's pick too
		}
		seen[key] = true
		row := KernelStats{Kernel: p.name, Spec: p.spec, Use: p.use}
		k, err := ks.get(p.name, p.spec)
		if err == nil {
			row.Spec = k.spec
			row.Stats, err = k.k.Statistics()
		}
		if err != nil {
			row.Err = err.Error()
		}
		out = append(out, row)
	}
	return out, nil
}
