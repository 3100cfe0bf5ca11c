package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/vk"
)

// `modrun devices --kernel-stats`: each usable device compiles every kernel
// its profile picks and prints what its compiler says of each
// (vulkan.KernelStatistics): registers, spills, occupancy, under the
// driver's own names. RADV's null device compiles for an AMD GPU without
// one (README.md, "Kernel statistics").

// kernelStats opens d with statistics kept and reads them.
func kernelStats(inst *vk.Instance, d vk.DeviceInfo) ([]vulkan.KernelStats, string) {
	return onDevice(inst, d, vulkan.KernelStatistics)
}

// writeKernelStats writes d's kernels, a line each: the kernel and its
// spec, what for, and every statistic the driver gave.
func (d deviceReport) writeKernelStats(w io.Writer) error {
	if d.KernelStatsError != "" {
		fmt.Fprintf(w, "    kernel stats: none: %s\n", d.KernelStatsError)
	}
	if len(d.KernelStats) == 0 {
		return nil
	}
	fmt.Fprintln(w, "    kernel stats:")
	for _, k := range d.KernelStats {
		var parts []string
		for _, s := range k.Stats {
			parts = append(parts, fmt.Sprintf("%s %g", s.Name, s.Value))
		}
		if k.Err != "" {
			parts = append(parts, "error: "+k.Err)
		}
		if _, err := fmt.Fprintf(w, "      %s%v (%s): %s\n", k.Kernel, k.Spec, k.Use, strings.Join(parts, ", ")); err != nil {
			return err
		}
	}
	return nil
}

// kernelStatsFailures is an error naming each device that could not report
// its kernels' statistics, or one of whose kernels could not be compiled
// (the exit status is then 1), or nil.
func (r *devicesReport) kernelStatsFailures() error {
	var bad []string
	for _, d := range r.Devices {
		n := 0
		for _, k := range d.KernelStats {
			if k.Err != "" {
				n++
			}
		}
		switch {
		case d.KernelStatsError != "":
			bad = append(bad, fmt.Sprintf("device %d (%s): %s", d.Index, d.Name, d.KernelStatsError))
		case n > 0:
			bad = append(bad, fmt.Sprintf("device %d (%s): %d of %d kernels not compiled", d.Index, d.Name, n, len(d.KernelStats)))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("devices --kernel-stats: %s", strings.Join(bad, "; "))
}
