package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	api "github.com/modrun/modrun"
	"github.com/modrun/modrun/bench"
	"github.com/modrun/modrun/shaders"
)

// printProfile prints the GPU time per kernel, or why there is none (on
// Vulkan: a CPU backend's is the warning of generationCommand.open), with
// the compute probe's peaks (nil, or probeErr, when it did not run) and
// the bandwidth probe's read rate (0 when it did not run).
//
// MB/call and GB/s: a matvec's weights (decode's bound is the rate they
// stream at: docs/matvec-cost.md); of BW: that rate's share of the
// bandwidth probe's (issue 42: where each kernel stands against its
// bound). FLOP/call and TFLOP/s: the products'
// arithmetic (shaders.KernelCost: matmuls, matvecs, attention), over the
// calls whose rows the host placed; "*" marks a kernel some of whose calls
// were not counted (a routed block's indirect dispatches, attention in
// groups of rows: vulkan.ProfileEntry.FLOPCalls). path and of
// peak: the arithmetic the products ran on (fp32: shader FMAs; tensor:
// cooperative matrices) and the rate's share of that path's probed peak.
// "-" where a kernel has none of these.
//
// wall is the generation's time (prefill and decode) when known: the
// kernels' share of it is the GPU's busy time, and the rest is what no
// timestamp covers, each dispatch's barrier and launch and the host
// between steps (docs/decode-attention-cost.md, "What a dispatch costs").
func printProfile(w io.Writer, info api.Info, entries []api.ProfileEntry, peaks *bench.Peaks, probeErr error, bw bench.Bandwidth, bwErr error, wall time.Duration) {
	if len(entries) == 0 {
		fmt.Fprintf(w, "profile: backend vulkan: %s cannot write GPU timestamps\n", info.Device)
		return
	}
	switch {
	case probeErr != nil:
		fmt.Fprintf(w, "peaks: the compute probe failed (no share of a peak below): %v\n", probeErr)
		peaks = nil
	case peaks != nil:
		tensor := fmt.Sprintf("%.3g TFLOP/s", peaks.TensorTFLOPs)
		if peaks.TensorTFLOPs == 0 {
			tensor = "none (" + peaks.NoTensor + ")"
		}
		fmt.Fprintf(w, "peaks (compute probe): fp32 %.3g TFLOP/s, tensor %s\n", peaks.FP32TFLOPs, tensor)
	}
	switch {
	case bwErr != nil:
		fmt.Fprintf(w, "bandwidth: the probe failed (no share of it below): %v\n", bwErr)
		bw.GBps = 0
	case bw.GBps > 0:
		fmt.Fprintf(w, "bandwidth (probe): %.1f GB/s read\n", bw.GBps)
	}
	var total uint64
	width := len("GPU total")
	for _, e := range entries {
		total += e.NS
		width = max(width, len(e.Kernel))
	}
	fmt.Fprintf(w, "%-*s %8s %10s %10s %6s %9s %8s %6s %10s %10s %6s %7s\n", width, "kernel", "calls", "total ms", "us/call", "%",
		"MB/call", "GB/s", "of BW", "FLOP/call", "TFLOP/s", "path", "of peak")
	partial := 0
	for _, e := range entries {
		mb, gbs, ofBW := "-", "-", "-"
		if e.Bytes > 0 && e.NS > 0 {
			rate := float64(e.Bytes) / float64(e.NS)
			mb, gbs = fmt.Sprintf("%.2f", float64(e.Bytes)/1e6/float64(e.Calls)), fmt.Sprintf("%.1f", rate)
			if bw.GBps > 0 {
				ofBW = fmt.Sprintf("%.1f%%", 100*rate/bw.GBps)
			}
		}
		flop, tflops, path, ofPeak := "-", "-", "-", "-"
		if e.FLOPCalls > 0 && e.FLOPNS > 0 {
			rate := float64(e.FLOPs) / float64(e.FLOPNS) / 1e3
			flop, tflops, path = si(float64(e.FLOPs)/float64(e.FLOPCalls)), fmt.Sprintf("%.3g", rate), e.Path
			if e.FLOPCalls < e.Calls {
				tflops += "*"
				partial++
			}
			if peaks != nil {
				if peak := peaks.Of(shaders.Path(e.Path)); peak > 0 {
					ofPeak = fmt.Sprintf("%.1f%%", 100*rate/peak)
				}
			}
		}
		fmt.Fprintf(w, "%-*s %8d %10.3f %10.2f %5.1f%% %9s %8s %6s %10s %10s %6s %7s\n", width, e.Kernel, e.Calls, float64(e.NS)/1e6,
			float64(e.NS)/1e3/float64(e.Calls), 100*float64(e.NS)/float64(total), mb, gbs, ofBW, flop, tflops, path, ofPeak)
	}
	fmt.Fprintf(w, "%-*s %8s %10.3f\n", width, "GPU total", "", float64(total)/1e6)
	if wall > 0 {
		fmt.Fprintf(w, "wall (prefill and decode) %.3f ms: the kernels %.1f%% of it; the rest (%.3f ms) is no kernel's: barriers, launches, the host\n",
			float64(wall)/1e6, 100*float64(total)/float64(wall), math.Max(0, float64(wall)-float64(total))/1e6)
	}
	if partial > 0 {
		fmt.Fprintf(w, "* FLOP/call and TFLOP/s over the calls whose rows the host placed: not a routed block's dispatches (sized on the GPU), nor attention in groups of rows\n")
	}
}

// si is x with 3 significant digits and an SI prefix: 8.39M, 11.8G.
func si(x float64) string {
	for _, p := range []struct {
		div    float64
		suffix string
	}{{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if x >= p.div {
			return strings.TrimSpace(fmt.Sprintf("%.3g%s", x/p.div, p.suffix))
		}
	}
	return fmt.Sprintf("%.3g", x)
}
