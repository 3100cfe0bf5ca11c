package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

func devicesMain(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("devices", "[--json] [--check] [--kernel-stats]", stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of text")
	check := fs.Bool("check", false, "run every kernel variant each usable device's profile picks once, against the CPU, and time it")
	stats := fs.Bool("kernel-stats", false, "compile every kernel each usable device's profile picks and print what its compiler reports (registers, spills), where the driver tells (VK_KHR_pipeline_executable_properties)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: devices takes no arguments, got %d", errUsage, fs.NArg())
	}
	inst, err := vk.NewInstance(vk.InstanceOptions{KernelStatistics: *stats})
	if err != nil {
		return err
	}
	defer inst.Close()
	devs, err := inst.Devices()
	if err != nil {
		return err
	}
	r := devicesReport{Devices: []deviceReport{}}
	chosen, err := vk.ChooseDevice(devs, -1)
	if err != nil {
		r.DefaultError = err.Error()
	}
	for _, d := range devs {
		def := err == nil && d.Index == chosen.Index
		if def {
			r.Default = &chosen.Index
		}
		dr := deviceReport{DeviceInfo: d, Default: def}
		dr.tuning()
		if *check && d.Problem == "" {
			dr.Checks, dr.CheckError = checkDevice(inst, d)
		}
		if *stats && d.Problem == "" {
			dr.KernelStats, dr.KernelStatsError = kernelStats(inst, d)
		}
		r.Devices = append(r.Devices, dr)
	}
	if err == nil {
		r.DefaultReason = vk.ChoiceReason(devs, chosen)
		// auto takes the default device unless it is a CPU emulation that
		// no one named (engine's choose): then the CPU backend is faster.
		r.Auto = "vulkan"
		if chosen.Type == vk.CPU && os.Getenv(vk.EnvDevice) == "" {
			r.Auto = "cpu"
		}
	} else {
		r.Auto = "cpu"
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else if err := r.writeText(stdout); err != nil {
		return err
	}
	if err := r.checkFailures(); err != nil {
		return err
	}
	return r.kernelStatsFailures()
}

// devicesReport is what `modrun devices` prints; its JSON form is --json.
type devicesReport struct {
	Devices      []deviceReport `json:"devices"`
	Default      *int           `json:"default"`                 // the index run uses without --device; null when none
	DefaultError string         `json:"default_error,omitempty"` // why there is none
	// DefaultReason says why run would pick the default device.
	DefaultReason string `json:"default_reason,omitempty"`
	// Auto is where --backend auto runs: "vulkan" (the default device) or
	// "cpu" (no usable device, or only a CPU emulation such as lavapipe).
	Auto string `json:"auto"`
}

type deviceReport struct {
	vk.DeviceInfo
	Default bool `json:"default"`
	// With --check, every kernel variant's check (devices_check.go).
	Checks []vulkan.SelfCheck `json:"checks,omitempty"`
	// KernelStats: --kernel-stats; KernelStatsError: why there are none.
	KernelStats      []vulkan.KernelStats `json:"kernel_stats,omitempty"`
	KernelStatsError string               `json:"kernel_stats_error,omitempty"`
	// Tuned are the tuning file's entries for the device (this build's
	// kernels; `modrun tune`), TunedStale how many more were measured with
	// other kernels, TuningError why the file could not be read.
	Tuned       []vulkan.TuningEntry `json:"tuned,omitempty"`
	TunedStale  int                  `json:"tuned_stale,omitempty"`
	TuningFile  string               `json:"tuning_file,omitempty"`
	TuningError string               `json:"tuning_error,omitempty"`
	CheckError  string               `json:"check_error,omitempty"` // the device could not be opened for it
}

// tuning fills d's tuning fields from the tuning file (vulkan.TuningPath).
func (d *deviceReport) tuning() {
	if d.TuningFile = vulkan.TuningPath(); d.TuningFile == "" {
		return
	}
	t, err := vulkan.LoadTuning(d.TuningFile)
	if err != nil {
		d.TuningError = err.Error()
		return
	}
	d.Tuned, d.TunedStale = t.ForDevice(d.DeviceInfo)
}

// writeTuning writes d's tuned lines: each model's kept knobs, and the
// entries of other kernels, which runs do not take.
func (d *deviceReport) writeTuning(w io.Writer) {
	if d.TuningError != "" {
		fmt.Fprintf(w, "    tuned:\t%s\n", d.TuningError)
	}
	for _, e := range d.Tuned {
		fmt.Fprintf(w, "    tuned:\t%s: %s (%s, %s)\n", e.Model, e.Knobs, d.TuningFile, e.Date)
	}
	if d.TunedStale > 0 {
		fmt.Fprintf(w, "    tuned:\t%d more in %s, measured with other kernels than this modrun's: not taken (modrun tune again)\n", d.TunedStale, d.TuningFile)
	}
}

func (r *devicesReport) writeText(w io.Writer) error {
	if len(r.Devices) == 0 {
		fmt.Fprintln(w, "no Vulkan devices")
	}
	for _, d := range r.Devices {
		mark := " "
		if d.Default {
			mark = "*"
		}
		fmt.Fprintf(w, "%s %d: %s", mark, d.Index, d.Name)
		if d.Default && r.Auto == "cpu" {
			fmt.Fprint(w, "  (default for --backend vulkan)")
		} else if d.Default {
			fmt.Fprint(w, "  (default)")
		}
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		l, f := d.Limits, d.Features
		fmt.Fprintf(tw, "    type:\t%s\n", d.Type)
		fmt.Fprintf(tw, "    driver:\t%s (%s)\n", d.DriverName, d.DriverInfo)
		fmt.Fprintf(tw, "    vulkan:\t%s (vendor 0x%04x, device 0x%04x)\n", d.APIVersion, d.VendorID, d.DeviceID)
		fmt.Fprintf(tw, "    memory:\t%s device-local\n", humanBytes(d.DeviceLocalBytes))
		if d.Problem != "" {
			fmt.Fprintf(tw, "    unusable:\t%s\n", d.Problem)
		}
		fmt.Fprintf(tw, "    workgroups:\t%d invocations, size %v, count %v, %s shared memory, subgroup %d\n",
			l.MaxComputeWorkGroupInvocations, l.MaxComputeWorkGroupSize, l.MaxComputeWorkGroupCount,
			humanBytes(uint64(l.MaxComputeSharedMemorySize)), l.SubgroupSize)
		fmt.Fprintf(tw, "    subgroups:\t%s\n", subgroupLine(d.DeviceInfo))
		if l.ComputeUnits > 0 { // what a grid must fill (the split matmuls' plans)
			unit := "CUs"
			if d.VendorID == 0x10de {
				unit = "SMs"
			}
			fmt.Fprintf(tw, "    cores:\t%d %s\n", l.ComputeUnits, unit)
		}
		fmt.Fprintf(tw, "    buffers:\t%s per binding, offsets aligned to %d, %d bytes of push constants\n",
			humanBytes(l.MaxStorageBufferRange), l.MinStorageBufferOffsetAlignment, l.MaxPushConstantsSize)
		if d.Timestamps() {
			fmt.Fprintf(tw, "    timestamps:\t%g ns per tick, %d bits\n", l.TimestampPeriod, l.TimestampValidBits)
		} else {
			fmt.Fprintf(tw, "    timestamps:\tnone on the compute queue\n")
		}
		fmt.Fprintf(tw, "    features:\t%s\n", featureText(f))
		d.writeTuning(tw)
		if err := tw.Flush(); err != nil {
			return err
		}
		if err := d.writeChecks(w); err != nil {
			return err
		}
		if err := d.writeKernelStats(w); err != nil {
			return err
		}
	}
	if r.DefaultError != "" {
		fmt.Fprintf(w, "default: none (%s)\n", r.DefaultError)
	}
	if r.Default != nil {
		fmt.Fprintf(w, "default: %d, %s\n", *r.Default, r.DefaultReason)
	}
	switch {
	case r.Auto == "vulkan":
		fmt.Fprintf(w, "--backend auto: runs on device %d\n", *r.Default)
	case r.Default != nil:
		fmt.Fprintf(w, "--backend auto: runs on the CPU backend (device %d is a CPU emulation, slower than it; --backend vulkan or --device %d uses it)\n", *r.Default, *r.Default)
	default:
		fmt.Fprintln(w, "--backend auto: runs on the CPU backend")
	}
	return nil
}

func featureText(f vk.Features) string {
	var parts []string
	for _, x := range []struct {
		name string
		on   bool
	}{
		{"float16", f.ShaderFloat16}, {"int8", f.ShaderInt8},
		{"16-bit storage", f.StorageBuffer16BitAccess}, {"8-bit storage", f.StorageBuffer8BitAccess},
		{"subgroup arithmetic", f.SubgroupArithmetic}, {"subgroup shuffle", f.SubgroupShuffle},
		{"subgroup ballot", f.SubgroupBallot},
		{"cooperative matrix", f.CooperativeMatrix}, {"cooperative matrix NV", f.CooperativeMatrixNV},
		{"cooperative matrix KHR", f.CooperativeMatrixKHR},
		{"conditional rendering", f.ConditionalRendering},
		{"subgroup size control", f.SubgroupSizeControl && f.ComputeFullSubgroups},
		{"kernel statistics", f.PipelineExecutableInfo},
		{"integer dot product", f.IntegerDotProduct},
	} {
		state := "no"
		if x.on {
			state = "yes"
		}
		if x.on && x.name == "integer dot product" && !f.IntegerDotProductAccelerated {
			state = "yes (emulated)"
		}
		parts = append(parts, x.name+" "+state)
	}
	return strings.Join(parts, ", ")
}

// subgroupLine says which subgroup size the kernels count on, and why
// (shaders.SubgroupSizeFor, the vendor table).
func subgroupLine(d vk.DeviceInfo) string {
	l, f := d.Limits, d.Features
	declared := "no size range declared"
	if l.MinSubgroupSize != 0 || l.MaxSubgroupSize != 0 {
		declared = fmt.Sprintf("compute subgroups of %d to %d", l.MinSubgroupSize, l.MaxSubgroupSize)
	}
	vendor, _ := shaders.Vendor(d.VendorID)
	control := f.SubgroupSizeControl && f.ComputeFullSubgroups && l.RequiredSubgroupSizeCompute
	sg, require := shaders.SubgroupSizeFor(shaders.SubgroupFacts{Vendor: d.VendorID, Reported: l.SubgroupSize,
		Min: l.MinSubgroupSize, Max: l.MaxSubgroupSize, Control: control})
	switch {
	case require:
		return fmt.Sprintf("every dispatch gets %d, required with full subgroups (%s; %s: %s): subgroup kernels allowed",
			sg, declared, vendor.Name, vendor.Sizes)
	case sg != 0:
		return fmt.Sprintf("every dispatch gets %d (%s; %s: %s): subgroup kernels allowed", sg, declared, vendor.Name, vendor.Sizes)
	}
	return fmt.Sprintf("size not sure (%d reported, %s, no subgroup size control; %s: %s): shared-memory kernels only",
		l.SubgroupSize, declared, vendor.Name, vendor.Sizes)
}
