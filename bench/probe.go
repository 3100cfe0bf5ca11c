package bench

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// Bandwidth is how fast a backend's device streams memory, measured by a
// probe on that device: the yardstick of a decode row's effective rate.
type Bandwidth struct {
	Device string  `json:"device"` // the backend's name: "cpu", "vulkan: NVIDIA H100 ..."
	Driver string  `json:"driver"` // the driver and its version, when a GPU
	GBps   float64 `json:"read_gbps"`
	Method string  `json:"method"` // how it was measured, in a few words
}

// ProbeBandwidth measures the read bandwidth of the device that backend
// name (cpu or vulkan) runs on: on Vulkan a kernel reads a large buffer
// (vulkan.ProbeBandwidth), on the CPU every core sums its share of one.
func ProbeBandwidth(o engine.BackendOptions) (Bandwidth, error) {
	switch o.Name {
	case engine.BackendCPU, engine.BackendReference:
		return probeCPU(), nil
	case engine.BackendVulkan:
		var out Bandwidth
		err := engine.OnVulkanDevice(o.Device, func(name string, dev *vk.Device) error {
			bw, err := vulkan.ProbeBandwidth(dev)
			info := dev.Info()
			out = Bandwidth{Device: name, Driver: info.DriverName + " " + info.DriverInfo, GBps: bw.GBps,
				Method: fmt.Sprintf("probe kernel: %d MiB read %d times, %s, median of runs", bw.Bytes>>20, bw.Passes, bw.Timer)}
			return err
		})
		if err != nil {
			return Bandwidth{}, err
		}
		return out, nil
	}
	return Bandwidth{}, fmt.Errorf("bench: bandwidth probe: backend %q is not cpu, reference or vulkan", o.Name)
}

// probeCPU reads a 256 MiB buffer with one goroutine per CPU, as the CPU
// backend's matrix products spread over them, five times; the median counts.
func probeCPU() Bandwidth {
	const size = 256 << 20
	buf := make([]uint64, size/8)
	for i := range buf {
		buf[i] = uint64(i) * 0x9E3779B97F4A7C15 // not zeros: nothing may shortcut them
	}
	workers := runtime.GOMAXPROCS(0)
	var rates []float64
	var sink uint64
	for run := 0; run < 5; run++ {
		sums := make([]uint64, workers)
		start := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				part := buf[w*len(buf)/workers : (w+1)*len(buf)/workers]
				var s0, s1, s2, s3 uint64
				for i := 0; i+3 < len(part); i += 4 {
					s0 += part[i]
					s1 += part[i+1]
					s2 += part[i+2]
					s3 += part[i+3]
				}
				sums[w] = s0 ^ s1 ^ s2 ^ s3
			}()
		}
		wg.Wait()
		rates = append(rates, size/float64(time.Since(start).Nanoseconds()))
		for _, s := range sums {
			sink ^= s
		}
	}
	sort.Float64s(rates)
	_ = sink
	return Bandwidth{Device: engine.BackendCPU, Driver: runtime.Version(), GBps: rates[len(rates)/2],
		Method: fmt.Sprintf("Go probe: 256 MiB summed by %d goroutines, median of 5", workers)}
}

// Peaks is how fast a backend's device computes, measured by the compute
// probes on that device (vulkan.ProbeCompute): the yardsticks of a
// prefill row's TFLOP/s, one per path the products may take.
type Peaks struct {
	Device       string  `json:"device"`
	FP32TFLOPs   float64 `json:"fp32_tflops"`             // shader FP32 FMAs; 0: not measured (the CPU backends)
	TensorTFLOPs float64 `json:"tensor_tflops,omitempty"` // tensor cores (cooperative matrices); 0: absent
	NoTensor     string  `json:"no_tensor,omitempty"`     // why there is no tensor figure
	Method       string  `json:"method"`
}

// Of is the peak of path p (shaders.Path) in TFLOP/s, 0 when not measured.
func (p Peaks) Of(path shaders.Path) float64 {
	return vulkan.Peaks{FP32TFLOPs: p.FP32TFLOPs, TensorTFLOPs: p.TensorTFLOPs}.Of(path)
}

// ProbeCompute measures the compute peaks of the device that backend o
// runs on: on Vulkan the FP32 and tensor-core probes; the CPU backends have
// no compute probe (their rows' share of a peak is left out).
func ProbeCompute(o engine.BackendOptions) (Peaks, error) {
	switch o.Name {
	case engine.BackendCPU, engine.BackendReference:
		return Peaks{Device: o.Name, Method: "no compute probe on the CPU backends"}, nil
	case engine.BackendVulkan:
		var out Peaks
		err := engine.OnVulkanDevice(o.Device, func(name string, dev *vk.Device) error {
			pk, err := vulkan.ProbeCompute(dev)
			method := "probe_fma (FP32 FMA chains in registers)"
			if pk.TensorTFLOPs > 0 {
				method += ", probe_coop (16x16x16 f16 tensor-core products in registers)"
			}
			out = Peaks{Device: name, FP32TFLOPs: pk.FP32TFLOPs, TensorTFLOPs: pk.TensorTFLOPs, NoTensor: pk.NoTensor,
				Method: fmt.Sprintf("probe kernels: %s; %s, median of runs", method, pk.Timer)}
			return err
		})
		if err != nil {
			return Peaks{}, err
		}
		return out, nil
	}
	return Peaks{}, fmt.Errorf("bench: compute probe: backend %q is not cpu, reference or vulkan", o.Name)
}
