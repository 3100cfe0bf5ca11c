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

// addTimings adds the last replay's timestamps to the profile.
func (r *Runner) addTimings(rec *vk.Recorder) {
	if !r.profile {
		return
	}
	bytes := r.profBytes[rec]
	for i, t := range rec.Timings() {
		e := r.prof[t.Label]
		if e == nil {
			e = &ProfileEntry{Kernel: t.Label}
			r.prof[t.Label] = e
		}
		e.Calls++
		e.NS += uint64(t.NS)
		if i < len(bytes) {
			e.Bytes += bytes[i]
		}
	}
}

// timestamp ends a profiled command under label.
func (r *Runner) timestamp(rec *vk.Recorder, label string) { r.timestampBytes(rec, label, 0) }

// timestampBytes is timestamp for a command that reads bytes of weights
// (opBytes).
func (r *Runner) timestampBytes(rec *vk.Recorder, label string, bytes uint64) {
	if r.profile {
		rec.Timestamp(label)
		r.profBytes[rec] = append(r.profBytes[rec], bytes)
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
	Weights uint64 // the model's tensors as uploaded (and the RoPE table)
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
	return m
}
