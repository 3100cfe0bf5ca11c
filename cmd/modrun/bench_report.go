package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/modrun/modrun/bench"
	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/shaders"
)

// benchReport is what `modrun bench` prints (Markdown) and writes (--out,
// --json): the machine, each device with its probed bandwidth, and a row
// per model, routing and backend.
type benchReport struct {
	Date    string            `json:"date"`
	Command string            `json:"command"`
	Machine string            `json:"machine"`
	CPUs    int               `json:"cpus"`
	Devices []bench.Bandwidth `json:"devices"`
	Peaks   []bench.Peaks     `json:"compute_peaks"` // each backend's compute probe, in the order of Devices
	Prompt  int               `json:"prompt_tokens"`
	Decode  int               `json:"decode_tokens"`
	Repeats int               `json:"repeats"`
	// Sampling says how the decoded tokens were drawn: greedy, or sampled
	// at --temp (bench.Options.Sampling).
	Sampling string           `json:"sampling"`
	Rows     []benchRowReport `json:"rows"`
}

type benchRowReport struct {
	// Tuning is what the tuning file gave the row (tuningOf); "" where
	// it gave nothing: the engine's defaults and the environment.
	Tuning   string `json:"tuning,omitempty"`
	Model    string `json:"model"`
	Shape    string `json:"shape,omitempty"` // a synthetic model's shape
	Baseline string `json:"baseline"`        // the model its ratios are against
	Routing  string `json:"routing"`         // dense, router or predictor
	Backend  string `json:"backend"`
	bench.Result
	VsBaseline             float64 `json:"decode_vs_baseline"`        // decode rate / the baseline's on this backend
	IdealVsBaseline        float64 `json:"ideal_decode_vs_baseline"`  // the baseline's decode bytes / this row's
	PrefillVsBaseline      float64 `json:"prefill_vs_baseline"`       // prefill rate / the baseline's on this backend
	IdealPrefillVsBaseline float64 `json:"ideal_prefill_vs_baseline"` // the baseline's prefill FLOPs / this row's
	PercentOfProbe         float64 `json:"effective_percent_of_probe"`
	// PrefillTFLOPs is the prefill's arithmetic rate: PrefillFLOPs (per
	// token) times PrefillRate; PrefillPath the path its matmuls took
	// ("fp32", "tensor"; "" on the CPU backends) and PrefillPercentOfPeak
	// its share of that path's probed peak (0 where none was measured).
	PrefillTFLOPs        float64 `json:"prefill_tflops"`
	PrefillPath          string  `json:"prefill_path,omitempty"`
	PrefillPercentOfPeak float64 `json:"prefill_percent_of_peak,omitempty"`
}

func newBenchReport(args []string, o bench.Options, devices []bench.Bandwidth, peaks []bench.Peaks, rows []*benchRow) *benchReport {
	rep := &benchReport{
		Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Command: "modrun bench " + strings.Join(args, " "),
		Machine: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(), Devices: devices, Peaks: peaks,
		Prompt: o.PromptTokens, Decode: o.DecodeTokens, Repeats: o.Repeats, Sampling: o.Sampling(),
	}
	for _, row := range rows {
		res := row.Result()
		r := benchRowReport{Model: row.model.name, Shape: row.model.shape, Baseline: row.model.baseline.name,
			Routing: routingName(row.model, row.routing), Backend: row.backend, Result: res}
		if base := baselineRow(rows, row); base != nil {
			b := base.Result()
			r.VsBaseline = res.DecodeRate / b.DecodeRate
			r.IdealVsBaseline = b.Traffic.Total() / res.Traffic.Total()
			r.PrefillVsBaseline = res.PrefillRate / b.PrefillRate
			r.IdealPrefillVsBaseline = b.PrefillFLOPs / res.PrefillFLOPs
		}
		if row.device.GBps > 0 {
			r.PercentOfProbe = 100 * res.EffectiveGBps / row.device.GBps
		}
		r.PrefillTFLOPs = res.PrefillFLOPs * res.PrefillRate / 1e12
		if mp, ok := row.b.Runner.(interface{ MatmulPath() shaders.Path }); ok {
			path := mp.MatmulPath()
			r.PrefillPath = string(path)
			if peak := row.peaks.Of(path); peak > 0 {
				r.PrefillPercentOfPeak = 100 * r.PrefillTFLOPs / peak
			}
		}
		r.Tuning = tuningOf(row.b)
		rep.Rows = append(rep.Rows, r)
	}
	return rep
}

// tuningOf is what the tuning file gave backend b ("" where nothing):
// its knobs, each the environment overrides marked, and the file.
func tuningOf(b *engine.Backend) string {
	if b.TuningFile == "" {
		return ""
	}
	return fmt.Sprintf("%s (%s)", b.Tuned.Describe(), b.TuningFile)
}

// tuningNote is the reports' line for rows the tuning file gave knobs to
// (each named by name), "" where none: a figure measured with tuned
// knobs must say so.
func tuningNote(names, tunings []string) string {
	var b strings.Builder
	for i, t := range tunings {
		if t != "" {
			fmt.Fprintf(&b, "- %s ran with the tuning file's knobs: %s (modrun tune; MODRUN_TUNING=off runs the defaults).\n", names[i], t)
		}
	}
	if b.Len() > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

// baselineRow is the first row of row's baseline model on row's backend.
func baselineRow(rows []*benchRow, row *benchRow) *benchRow {
	for _, r := range rows {
		if r.model == row.model.baseline && r.backend == row.backend {
			return r
		}
	}
	return nil
}

func (rep *benchReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# modrun bench, %s\n\n", rep.Date)
	fmt.Fprintf(&b, "`%s` on %s, %d CPUs.\n\n", rep.Command, rep.Machine, rep.CPUs)
	fmt.Fprintf(&b, "| backend | device | driver | read bandwidth (probe) | how |\n|---|---|---|---|---|\n")
	for _, d := range rep.Devices {
		fmt.Fprintf(&b, "| %s | %s | %s | %.1f GB/s | %s |\n", backendOf(d.Device), d.Device, d.Driver, d.GBps, d.Method)
	}
	fmt.Fprintf(&b, "\n| backend | device | FP32 peak (probe) | tensor peak (probe) | how |\n|---|---|---|---|---|\n")
	for _, p := range rep.Peaks {
		fp32, tensor := "—", "—"
		if p.FP32TFLOPs > 0 {
			fp32 = fmt.Sprintf("%.3g TFLOP/s", p.FP32TFLOPs)
		}
		if p.TensorTFLOPs > 0 {
			tensor = fmt.Sprintf("%.3g TFLOP/s", p.TensorTFLOPs)
		} else if p.NoTensor != "" {
			tensor = "none: " + p.NoTensor
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", backendOf(p.Device), p.Device, fp32, tensor, p.Method)
	}
	fmt.Fprintf(&b, "\nEach row was validated before anything was timed, against the CPU reference over the prompt's last token and the greedy tokens after it "+
		"(the `validated` column: tokens decoded after prompt tokens; fewer where the CPU reference is slow): "+
		"`top-1` is the share of next-token distributions whose most likely token is the reference's, `KL` their mean and largest KL divergence from the reference's (nats), `Δlogit` the largest logit difference (and its share of the step's largest |logit|). "+
		"A row is refused only for what its path's rounding cannot explain (a distribution moved, or a decisive greedy token changed, beyond the path's logit bound), never for a near-tie. "+
		"Rates are medians of %d runs, taken round by round over all rows: prefill of %d tokens, decode of %d (%s). "+
		"Effective bandwidth is the bytes a decode token must read (each weight it uses once, the KV entries it attends to, at the mean context of the decode) times tokens/s; "+
		"`prefill TFLOP/s` is the model's FLOPs per prompt token (at the prompt's mean position, the routed layers' seen shares) times prefill tokens/s, `of peak` its share of the probed peak of the path its matmuls took (fp32: shader arithmetic; tensor: cooperative matrices). "+
		"`× base` is a rate against the baseline model on the same backend (a MoD twin's dense model), `ideal ×` the ratio of the baseline's cost per token to this row's (FLOPs in prefill, bytes in decode), `of ideal` the share of that achieved.\n\n",
		rep.Repeats, rep.Prompt, rep.Decode, rep.Sampling)
	if rep.Repeats < minRepeatsOfIdeal {
		fmt.Fprintf(&b, "`of ideal` is left out: it needs --repeats %d or more, since one run's ratio of two rates is noise (it read 149%% once).\n\n", minRepeatsOfIdeal)
	}
	var names, tunings []string
	for _, r := range rep.Rows {
		names, tunings = append(names, fmt.Sprintf("%s (%s) on %s", r.Model, r.Routing, r.Backend)), append(tunings, r.Tuning)
	}
	b.WriteString(tuningNote(names, tunings))
	fmt.Fprintf(&b, "| model | routing | backend | prefill tok/s | prefill TFLOP/s | of peak | × base | ideal × | decode tok/s | × base | ideal × | of ideal | eff. GB/s | %% of probe | routed %% per layer | validated | top-1 | mean KL | max KL | max Δlogit |\n")
	fmt.Fprintf(&b, "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|--:|--:|--:|--:|\n")
	for _, r := range rep.Rows {
		pvs, pideal, vs, ideal, of := "—", "—", "—", "—", "—"
		if r.Model != r.Baseline && r.VsBaseline > 0 {
			pvs, pideal = fmt.Sprintf("%.2f", r.PrefillVsBaseline), fmt.Sprintf("%.2f", r.IdealPrefillVsBaseline)
			vs, ideal = fmt.Sprintf("%.2f", r.VsBaseline), fmt.Sprintf("%.2f", r.IdealVsBaseline)
			if rep.Repeats >= minRepeatsOfIdeal {
				of = fmt.Sprintf("%.0f%%", 100*r.VsBaseline/r.IdealVsBaseline)
			}
		}
		ofPeak := "—"
		if r.PrefillPercentOfPeak > 0 {
			ofPeak = fmt.Sprintf("%.1f%% %s", r.PrefillPercentOfPeak, r.PrefillPath)
		}
		validated, top1, meanKL, maxKL, dlogit := "no (--validate 0)", "—", "—", "—", "—"
		if v := r.Validation; v.Steps > 0 {
			validated = fmt.Sprintf("%d after %d", r.ValidateTokens, r.ValidatePrompt)
			if r.ValidatePrompt < rep.Prompt {
				validated += " (CPU reference slow)"
			}
			if v.RoutingNearTie {
				validated += fmt.Sprintf(" (a routing near-tie at step %d: later steps reported, not held)", v.RoutingNearTieStep)
			}
			top1 = fmt.Sprintf("%.0f%%", 100*v.Top1Agreement)
			meanKL, maxKL, dlogit = fmt.Sprintf("%.2g", v.MeanKL), fmt.Sprintf("%.2g", v.MaxKL), fmt.Sprintf("%.2g (%.2g%%)", v.MaxLogitDiff, 100*v.MaxRelLogitDiff)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.3g | %s | %s | %s | %.1f | %s | %s | %s | %.2f | %.1f | %s | %s | %s | %s | %s | %s |\n",
			r.Model, r.Routing, r.Backend+" ("+r.KVType+" KV)", r.PrefillRate, r.PrefillTFLOPs, ofPeak, pvs, pideal, r.DecodeRate, vs, ideal, of,
			r.EffectiveGBps, r.PercentOfProbe, percents(r.RoutedPercent), validated, top1, meanKL, maxKL, dlogit)
	}
	return b.String()
}

// minRepeatsOfIdeal is the fewest runs whose medians make the share of the
// ideal speedup worth printing.
const minRepeatsOfIdeal = 3

// backendOf is the backend name of a device name: "cpu" or "vulkan".
func backendOf(device string) string {
	name, _, _ := strings.Cut(device, ":")
	return name
}

func (rep *benchReport) writeJSON(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func percents(p []float64) string {
	if len(p) == 0 {
		return "dense"
	}
	parts := make([]string, len(p))
	for i, v := range p {
		parts[i] = fmt.Sprintf("%.0f", v)
	}
	return strings.Join(parts, ", ")
}
