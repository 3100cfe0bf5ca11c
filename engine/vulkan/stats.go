package vulkan

import (
	"sort"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// Where the runner's GPU time (Options.Profile) and memory go.

// ProfileEntry is the GPU time of one kernel (or "copy") summed over every
// replay of the step since New.
type ProfileEntry struct {
	Kernel string // the shader variant's name, e.g. "matvec_f32"
	Calls  int    // commands replayed; an indirect dispatch of 0 groups counts
	NS     uint64 // GPU nanoseconds
	// Bytes is, for a matvec, the bytes of weights its calls read, summed
	// (Bytes/NS is its weights' GB/s: decode's figure of merit, issue 42);
	// 0 for other kernels, whose reads the bindings do not tell exactly.
	Bytes uint64
	// FLOPs is the arithmetic of the calls whose work the host knows
	// (shaders.KernelCost), FLOPCalls how many they are and FLOPNS their GPU
	// time: FLOPs/FLOPNS is the kernel's rate. A routed block's indirect
	// dispatches (their row count is on the GPU) and attention over a group
	// of the rows (rowGroup) are not among them, nor any call of a kernel
	// whose FLOPs are not counted (FLOPCalls 0).
	FLOPs     uint64
	FLOPCalls int
	FLOPNS    uint64
	Path      string // the products' arithmetic (shaders.Path): "fp32" or "tensor"; "" when not counted
}

// Profile is the GPU time per kernel, most first (ties by name); nil unless
// the runner was made with Options.Profile on a device with timestamps.
//
// Each command's time runs from the timestamp before it to the one after it,
// so it includes the barrier that waits for the command before: what the
// step would lose without that command.
func (r *Runner) Profile() []ProfileEntry {
	if len(r.prof) == 0 {
		return nil
	}
	out := make([]ProfileEntry, 0, len(r.prof))
	for _, e := range r.prof {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].NS != out[j].NS {
			return out[i].NS > out[j].NS
		}
		return out[i].Kernel < out[j].Kernel
	})
	return out
}

// profCmd is what the profile knows of a timestamped command besides its
// time.
type profCmd struct {
	bytes   uint64       // weight bytes read (opBytes)
	cost    shaders.Cost // its arithmetic, when counted
	counted bool
}

// addTimings adds the last replay's timestamps to the profile; start is the
// position of the replay's first row (the keys a causal row attends to when
// its count lives on the GPU: shaders.Cost.PerStart), or -1 when the
// replay's rows have no one start (a step of many sequences).
func (r *Runner) addTimings(rec *vk.Recorder, start int) {
	if !r.profile {
		return
	}
	cmds := r.profCmds[rec]
	for i, t := range rec.Timings() {
		e := r.prof[t.Label]
		if e == nil {
			e = &ProfileEntry{Kernel: t.Label}
			r.prof[t.Label] = e
		}
		e.Calls++
		e.NS += uint64(t.NS)
		if i >= len(cmds) {
			continue
		}
		c := cmds[i]
		e.Bytes += c.bytes
		if c.counted && (start >= 0 || c.cost.PerStart == 0) {
			e.FLOPs += c.cost.At(uint32(max(start, 0)))
			e.FLOPCalls++
			e.FLOPNS += uint64(t.NS)
			e.Path = string(c.cost.Path)
		}
	}
}

// timestamp ends a profiled command under label.
func (r *Runner) timestamp(rec *vk.Recorder, label string) { r.timestampCmd(rec, label, profCmd{}) }

// timestampOp ends op o's command; direct says whether o was dispatched with
// its own workgroup counts (an indirect dispatch's rows are on the GPU, so
// its FLOPs are not counted).
func (r *Runner) timestampOp(rec *vk.Recorder, o op, direct bool) {
	c := profCmd{bytes: opBytes(o)}
	if direct && !rowGroup(o) {
		c.cost, c.counted = shaders.KernelCost(o.k.v.Name, o.push)
	}
	r.timestampCmd(rec, o.k.v.Name, c)
}

// rowGroup says whether o is a batched attention over one group of a
// pass's rows (batchAttentionOps binds q and qPos in part where the
// partial results would pass a binding's range): its push constants say
// how many rows, not where they start, so the keys they attend to are not
// counted.
func rowGroup(o op) bool {
	return o.k.v.Source == "attention_split.comp" && len(o.binds) > 4 && o.binds[4].Size != 0
}

func (r *Runner) timestampCmd(rec *vk.Recorder, label string, c profCmd) {
	if r.profile {
		rec.Timestamp(label)
		r.profCmds[rec] = append(r.profCmds[rec], c)
	}
}

// opBytes is the bytes of weights op reads: a matvec's weights binding
// (binding 0), whole; 0 for other ops.
func opBytes(o op) uint64 {
	if o.k.v.Op != shaders.OpMatvec || len(o.binds) == 0 {
		return 0
	}
	if b := o.binds[0]; b.Size != 0 {
		return b.Size
	}
	return o.binds[0].Buf.Size() - o.binds[0].Offset
}

// MemoryStats is the GPU memory the runner holds, in bytes, by use.
type MemoryStats struct {
	Weights uint64 // the model's tensors as uploaded (and the RoPE table; with MODRUN_MATMUL_DIRECT=resident their planes of halves)
	KVCache uint64 // every layer's keys, values and positions, for ContextLen tokens
	Scratch uint64 // activations, routing state, the step's inputs and outputs
}

// Total is the sum of the three.
func (m MemoryStats) Total() uint64 { return m.Weights + m.KVCache + m.Scratch }

// MemoryStats sums the sizes of the runner's buffers (as asked for: the
// driver may round each allocation up).
func (r *Runner) MemoryStats() MemoryStats {
	var m MemoryStats
	if r.dev == nil { // closed
		return m
	}
	for i, b := range r.bufs {
		if i < r.nWeightBufs {
			m.Weights += b.Size()
		} else {
			m.Scratch += b.Size()
		}
	}
	for _, lc := range r.cache {
		for _, b := range []*vk.Buffer{lc.k, lc.v, lc.pos} {
			m.KVCache += b.Size()
			m.Scratch -= b.Size()
		}
	}
	if r.pf != nil { // the weights' resident planes, made after the scratch
		m.Weights += r.pf.residentBytes
		m.Scratch -= r.pf.residentBytes
	}
	return m
}

// MatmulPath is the arithmetic the runner's prefill matmuls run on: the
// tensor cores where its profile took the cooperative-matrix matmul
// (after the self-check), shader FP32 otherwise. A prefill's TFLOP/s is a
// share of that path's peak (ProbeCompute).
func (r *Runner) MatmulPath() shaders.Path {
	if r.ks.prof.MatmulCoop {
		return shaders.PathTensor
	}
	return shaders.PathShader
}
