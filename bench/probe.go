package bench

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/engine/vulkan"
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
