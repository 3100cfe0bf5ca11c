package vulkan

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// Peaks is what the compute probes measured on one device: the yardsticks
// of a kernel's TFLOP/s, one per path (shaders.Path).
type Peaks struct {
	FP32TFLOPs   float64 // probe_fma: shader FP32 FMAs, the median run
	TensorTFLOPs float64 // probe_coop: cooperative-matrix f16 x f16 -> f32 products; 0 where absent
	// NoTensor says why there is no tensor figure ("" when there is one).
	NoTensor string
	Timer    string // "timestamps" (GPU clock) or "wall clock" (submit to wait)
}

// Of is the peak of path p in TFLOP/s, 0 when it was not measured.
func (pk Peaks) Of(p shaders.Path) float64 {
	switch p {
	case shaders.PathShader:
		return pk.FP32TFLOPs
	case shaders.PathTensor:
		return pk.TensorTFLOPs
	}
	return 0
}

// The compute probes' sizes. A GPU gets enough workgroups to fill any
// device (4096 of 128 or 256 invocations: an H200 holds about 270,000 at
// once); a CPU device (lavapipe) a few, since its open and tests pay for
// them. The trips per invocation start at computeProbeFirst and are
// scaled after a warm-up pass so that a pass takes about
// computeProbeTarget on the GPU's clock, within lavapipe's loop cap.
const (
	computeProbeGroupsGPU = 4096
	computeProbeGroupsCPU = 4
	computeProbeFirst     = 16
	computeProbeMaxTrips  = 16384
	computeProbeTarget    = 2 * time.Millisecond
	computeProbePasses    = 5
	computeProbeRuns      = 5
)

// ProbeCompute measures how fast dev computes: probe_fma's FP32 FMA chains
// (every device), and where the device has VK_NV_cooperative_matrix with
// subgroups of 32 (the tensor-core matmul's path: shaders.Profile's
// MatmulCoop), probe_coop's tensor-core products. Each runs
// computeProbePasses dispatches in one submit, computeProbeRuns times; the
// median run counts, and every run's output must be the exact count its
// FLOP formula assumes, else no rate is reported for work it did not do:
// probe_fma's failure is an error, probe_coop's leaves NoTensor saying so.
func ProbeCompute(dev *vk.Device) (Peaks, error) {
	info := dev.Info()
	prof := DeviceProfile(info)
	ks := newKernels(dev, nil, nil)
	defer ks.Close()
	pk := Peaks{Timer: "wall clock"}
	if info.Timestamps() {
		pk.Timer = "timestamps"
	}
	groups := uint32(computeProbeGroupsGPU)
	if prof.CPU {
		groups = computeProbeGroupsCPU
	}
	fma, err := ks.get("probe_fma", nil)
	if err != nil {
		return Peaks{}, err
	}
	pk.FP32TFLOPs, err = probeRate(dev, fma, groups, groups*shaders.ProbeFMALocalSize, shaders.ProbeFMAFLOPs, shaders.ProbeFMAResult)
	if err != nil {
		return Peaks{}, fmt.Errorf("vulkan: compute probe probe_fma: %w", err)
	}
	if name, none := prof.CoopProbe(); name == "" {
		pk.NoTensor = none
	} else {
		// A failure here leaves the FP32 figure standing and says why
		// there is no tensor one.
		coop, err := ks.get(name, nil)
		if err == nil {
			pk.TensorTFLOPs, err = probeRate(dev, coop, groups, groups*shaders.ProbeCoopSubgroups*256, shaders.ProbeCoopFLOPs, shaders.ProbeCoopResult)
		}
		if err != nil {
			pk.TensorTFLOPs, pk.NoTensor = 0, fmt.Sprintf("%s failed: %v", name, err)
		}
	}
	return pk, nil
}

// probeRate times k (probe_fma or probe_coop) over groups workgroups, its
// outputs outs floats, in TFLOP/s: flops is a dispatch's FLOPs and result
// every output's value, for a number of trips.
func probeRate(dev *vk.Device, k *kernel, groups, outs uint32, flops func(groups, trips uint32) uint64, result func(trips uint32) float32) (float64, error) {
	out, err := dev.NewBuffer(4*uint64(outs), vk.DeviceLocal)
	if err != nil {
		return 0, err
	}
	defer out.Close()
	run := func(trips uint32, passes int) (ns float64, err error) {
		rec := dev.NewRecorder()
		defer rec.Close()
		push := vk.MustPackPush(shaders.ProbeFlopsPush{Iterations: trips, A: 1, B: 1})
		for i := 0; i < passes; i++ {
			rec.Dispatch(k.k, push, [3]uint32{groups, 1, 1}, vk.Bind{Buf: out, Access: vk.Write})
		}
		rec.Timestamp(k.v.Name)
		start := time.Now()
		if err := dev.Run(rec); err != nil {
			return 0, err
		}
		ns = float64(time.Since(start).Nanoseconds())
		if t := rec.Timings(); len(t) == 1 && t[0].NS > 0 {
			ns = t[0].NS
		}
		return ns, checkProbeOutput(out, outs, result(trips))
	}
	ns, err := run(computeProbeFirst, 1) // the warm-up sizes the timed passes
	if err != nil {
		return 0, err
	}
	trips := uint32(computeProbeMaxTrips)
	if want := computeProbeFirst * float64(computeProbeTarget.Nanoseconds()) / ns; want < computeProbeMaxTrips {
		trips = max(1, uint32(want))
	}
	var rates []float64
	for i := 0; i < computeProbeRuns; i++ {
		ns, err := run(trips, computeProbePasses)
		if err != nil {
			return 0, err
		}
		rates = append(rates, float64(flops(groups, trips))*computeProbePasses/ns/1e3)
	}
	sort.Float64s(rates)
	return rates[len(rates)/2], nil
}

// checkProbeOutput says whether every one of the n floats of out is want.
func checkProbeOutput(out *vk.Buffer, n uint32, want float32) error {
	raw := make([]byte, 4*n)
	if err := out.Download(raw, 0); err != nil {
		return err
	}
	for i := uint32(0); i < n; i++ {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != want {
			return fmt.Errorf("output %d is %g, not the %g its FLOP count assumes", i, got, want)
		}
	}
	return nil
}
