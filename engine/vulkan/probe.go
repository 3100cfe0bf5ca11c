package vulkan

import (
	"fmt"
	"sort"
	"time"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// Bandwidth is what the memory probe measured on one device.
type Bandwidth struct {
	Bytes  uint64  // read per pass
	Passes int     // timed passes
	GBps   float64 // median read rate, 1e9 bytes/s
	Timer  string  // "timestamps" (GPU clock) or "wall clock" (submit to wait)
}

// Probe buffer size: large enough to dwarf every cache (an H100's L2 is
// 50 MB), capped by one binding's range and a quarter of the device's
// memory (lavapipe: 128 MiB).
const (
	probeMaxBytes = 1 << 30
	probePasses   = 10
	probeRuns     = 5
)

// ProbeBandwidth measures how fast dev reads memory: the yardstick against
// which `modrun bench` puts a decode row's effective bandwidth. A buffer
// is filled with a pattern, then read whole probePasses times in one
// submit, probeRuns times; the median run counts. With timestamps the GPU
// clock times the passes alone; without, the wall clock includes one
// submit and wait, a small share of a run of passes over a large buffer.
func ProbeBandwidth(dev *vk.Device) (Bandwidth, error) {
	info := dev.Info()
	size := min(uint64(probeMaxBytes), info.Limits.MaxStorageBufferRange, info.DeviceLocalBytes/4) &^ 15
	if size < 1<<20 {
		return Bandwidth{}, fmt.Errorf("vulkan: probe: %s offers only %d bytes", info.Name, size)
	}
	ks := newKernels(dev, nil, nil)
	defer ks.Close()
	fill, err := ks.get("probe_fill", nil)
	if err != nil {
		return Bandwidth{}, err
	}
	read, err := ks.get("probe_read", nil)
	if err != nil {
		return Bandwidth{}, err
	}
	src, err := dev.NewBuffer(size, vk.DeviceLocal)
	if err != nil {
		return Bandwidth{}, fmt.Errorf("vulkan: probe buffer of %d bytes: %w", size, err)
	}
	defer src.Close()
	sink, err := dev.NewBuffer(16, vk.DeviceLocal)
	if err != nil {
		return Bandwidth{}, err
	}
	defer sink.Close()
	n := uint32(size / 16)
	push := vk.MustPackPush(shaders.ProbePush{N: n, Magic: 0x5eed1e55})
	groups := shaders.ProbeGroups(n)

	first := dev.NewRecorder()
	first.Dispatch(fill.k, push, groups, vk.Bind{Buf: src, Access: vk.Write})
	first.Dispatch(read.k, push, groups, vk.Bind{Buf: src, Access: vk.Read}, vk.Bind{Buf: sink, Access: vk.Write})
	err = dev.Run(first) // the pattern, and a warm-up read
	first.Close()
	if err != nil {
		return Bandwidth{}, fmt.Errorf("vulkan: probe: %w", err)
	}
	rec := dev.NewRecorder()
	defer rec.Close()
	for i := 0; i < probePasses; i++ {
		rec.Dispatch(read.k, push, groups, vk.Bind{Buf: src, Access: vk.Read}, vk.Bind{Buf: sink, Access: vk.Write})
	}
	rec.Timestamp("read")
	b := Bandwidth{Bytes: size, Passes: probePasses, Timer: "wall clock"}
	if info.Timestamps() {
		b.Timer = "timestamps"
	}
	var rates []float64
	for i := 0; i < probeRuns; i++ {
		start := time.Now()
		if err := dev.Run(rec); err != nil {
			return Bandwidth{}, fmt.Errorf("vulkan: probe: %w", err)
		}
		ns := float64(time.Since(start).Nanoseconds())
		if t := rec.Timings(); len(t) == 1 && t[0].NS > 0 {
			ns = t[0].NS
		}
		rates = append(rates, float64(size)*probePasses/ns)
	}
	sort.Float64s(rates)
	b.GBps = rates[len(rates)/2]
	return b, nil
}
