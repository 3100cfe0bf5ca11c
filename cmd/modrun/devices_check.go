package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/vk"
)

// `modrun devices --check`: each usable device runs every kernel variant
// its profile picks once on a small input against the CPU, and times it
// (vulkan.CheckDevice, the self-check a model's load runs on the variants
// its graph uses, here on all of them).

// checkDevice opens d and checks it.
func checkDevice(inst *vk.Instance, d vk.DeviceInfo) ([]vulkan.SelfCheck, string) {
	return onDevice(inst, d, vulkan.CheckDevice)
}

// onDevice opens d, runs f on it and closes it: f's result, and why it
// failed ("" when it did not), for a device's line of the report.
func onDevice[T any](inst *vk.Instance, d vk.DeviceInfo, f func(*vk.Device) (T, error)) (T, string) {
	dev, err := inst.NewDevice(d)
	if err != nil {
		var zero T
		return zero, err.Error()
	}
	defer dev.Close()
	out, err := f(dev)
	if err != nil {
		return out, err.Error()
	}
	return out, ""
}

// writeChecks writes d's check table: kernel, variant, pass or FAIL (with
// how far off, or why it could not run), and the time of a call.
func (d deviceReport) writeChecks(w io.Writer) error {
	if d.CheckError != "" {
		fmt.Fprintf(w, "    check:       could not run: %s\n", d.CheckError)
	}
	if len(d.Checks) == 0 {
		return nil
	}
	fmt.Fprintln(w, "    check:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "      kernel\tvariant\tresult\tus/call")
	for _, c := range d.Checks {
		result := "pass"
		switch {
		case c.Err != "":
			result = "FAIL: " + c.Err
		case !c.Pass:
			result = fmt.Sprintf("FAIL: %.3g times its tolerance off the CPU", c.Worst)
		}
		fmt.Fprintf(tw, "      %s\t%s\t%s\t%.1f\n", c.Op, c.Variant(), result, c.USPerCall)
	}
	return tw.Flush()
}

// checkFailures is an error naming each device where a checked kernel
// failed (the exit status is then 1), or nil.
func (r *devicesReport) checkFailures() error {
	var bad []string
	report := false
	for _, d := range r.Devices {
		n := 0
		for _, c := range d.Checks {
			if !c.Pass {
				n++
			}
		}
		switch {
		case (n > 0 || d.CheckError != "") && d.DeviceLocalBytes == 0:
			// Nothing can run without memory: a compile-only device such
			// as RADV's null one (RADV_FORCE_FAMILY), not a GPU to report.
			bad = append(bad, fmt.Sprintf("device %d (%s): %d of %d kernels failed: it has no device memory, so nothing runs there (a compile-only device, such as RADV's null device: devices --kernel-stats is what it answers)",
				d.Index, d.Name, n, len(d.Checks)))
		case n > 0 || d.CheckError != "":
			bad = append(bad, fmt.Sprintf("device %d (%s): %d of %d kernels failed", d.Index, d.Name, n, len(d.Checks)))
			report = true
		}
	}
	if len(bad) == 0 {
		return nil
	}
	if !report {
		return fmt.Errorf("devices --check: %v", bad)
	}
	return fmt.Errorf("devices --check: %v: please report this output (README.md, Supported GPUs)", bad)
}
