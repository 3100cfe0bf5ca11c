package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/modrun/modrun/bench"
	"github.com/modrun/modrun/engine"
)

// parallelFlags are bench's --parallel mode: P sequences at once on a
// backend's scheduler (engine/sched), against a single stream.
type parallelFlags struct {
	list        string // --parallel 1,4,8,16
	counts      []int
	batchTokens int
	backends    []string // cpu unless --backends names vulkan too or instead
}

func (p *parallelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.list, "parallel", "", "comma-separated numbers of sequences `P` run at once on the CPU backend, or on each of --backends cpu,vulkan (e.g. 1,4,8,16): aggregate decode tok/s, tok/s per sequence and time to first token against a single stream")
	fs.IntVar(&p.batchTokens, "batch-tokens", 512, "with --parallel: rows one step runs at most (decode rows and prompt chunks)")
}

// check parses --parallel; a single stream (1) is always measured, as the
// baseline.
func (p *parallelFlags) check(fs *flag.FlagSet, backends []string) error {
	if p.list == "" {
		return nil
	}
	p.counts = []int{1}
	for _, s := range strings.Split(p.list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 256 {
			return fmt.Errorf("%w: --parallel %q: want numbers of sequences from 1 to 256, comma-separated", errUsage, s)
		}
		if n != 1 {
			p.counts = append(p.counts, n)
		}
	}
	if p.batchTokens < 1 {
		return fmt.Errorf("%w: --batch-tokens %d: must be positive", errUsage, p.batchTokens)
	}
	p.backends = []string{engine.BackendCPU}
	if flagSet(fs, "backends") {
		for _, b := range backends {
			if b != engine.BackendCPU && b != engine.BackendVulkan {
				return fmt.Errorf("%w: --parallel runs on the cpu and vulkan backends, not %s: give --backends cpu, vulkan or cpu,vulkan", errUsage, b)
			}
		}
		p.backends = backends
	}
	return nil
}

// parallelReport is what bench --parallel prints and writes.
type parallelReport struct {
	Date    string `json:"date"`
	Command string `json:"command"`
	Machine string `json:"machine"`
	CPUs    int    `json:"cpus"`
	Prompt  int    `json:"prompt_tokens"`
	Decode  int    `json:"decode_tokens"`
	Repeats int    `json:"repeats"`
	Batch   int    `json:"batch_tokens"`
	// Sampling says how the decoded tokens were drawn (bench.Options.Sampling).
	Sampling string              `json:"sampling"`
	Rows     []parallelRowReport `json:"rows"`
}

type parallelRowReport struct {
	Tuning  string `json:"tuning,omitempty"` // benchRowReport's
	Model   string `json:"model"`
	Routing string `json:"routing"`
	Backend string `json:"backend"`
	bench.ParallelResult
	AggregateVsSingle   float64 `json:"aggregate_decode_vs_single"`
	PerSequenceVsSingle float64 `json:"per_sequence_decode_vs_single"`
	FirstTokenVsSingle  float64 `json:"time_to_first_token_vs_single"`
}

type parallelRow struct {
	*bench.Parallel
	model   *benchModel
	routing string
	backend string
}

// benchParallel runs --parallel: each model and routing at each P, the
// rounds interleaved over all rows, then the report.
func benchParallel(f *benchFlags, models []*benchModel, args []string, stdout, stderr io.Writer) error {
	var rows []parallelRow
	for _, m := range models {
		prompt, err := m.tok.Encode(strings.Repeat(benchText, 1+f.o.PromptTokens/30), true)
		if err != nil {
			return err
		}
		for _, routing := range f.routingsOf(m) {
			for _, backend := range f.par.backends {
				for _, p := range f.par.counts {
					fmt.Fprintf(stderr, "bench: validating %s %s on %s at --parallel %d against each sequence alone\n", m.name, routingName(m, routing), backend, p)
					bo := engine.BackendOptions{Name: backend, Device: f.device, KVType: f.cache.kvType}
					b, err := bench.NewParallel(m.model, routing, prompt, f.o, p, f.par.batchTokens, bo)
					if err != nil {
						return fmt.Errorf("%s on %s: %w", m.name, backend, err)
					}
					defer b.Close()
					rows = append(rows, parallelRow{b, m, routingName(m, routing), backend})
				}
			}
		}
	}
	for i := 0; i < f.o.Repeats; i++ {
		for _, row := range rows {
			if err := row.Time(); err != nil {
				return fmt.Errorf("%s: %w", row.model.name, err)
			}
		}
	}
	rep := parallelReport{Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Command: "modrun bench " + strings.Join(args, " "),
		Machine: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(), Prompt: f.o.PromptTokens, Decode: f.o.DecodeTokens,
		Repeats: f.o.Repeats, Batch: f.par.batchTokens, Sampling: f.o.Sampling()}
	var single bench.ParallelResult
	for _, row := range rows {
		res := row.Result()
		if res.Parallel == 1 {
			single = res
		}
		rep.Rows = append(rep.Rows, parallelRowReport{Tuning: tuningOf(row.Backend()), Model: row.model.name, Routing: row.routing, Backend: row.backend, ParallelResult: res,
			AggregateVsSingle:   res.AggregateDecodeRate / single.AggregateDecodeRate,
			PerSequenceVsSingle: res.PerSequenceDecodeRate / single.PerSequenceDecodeRate,
			FirstTokenVsSingle:  res.TimeToFirstToken / single.TimeToFirstToken})
	}
	text := rep.markdown()
	if err := writeReport(stdout, f.asJSON, rep, text); err != nil {
		return err
	}
	if f.out != "" {
		if err := os.WriteFile(f.out, []byte(text), 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if f.json != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.WriteFile(f.json, append(b, '\n'), 0o644)
		}
		if err != nil {
			return fmt.Errorf("--json-out: %w", err)
		}
	}
	return nil
}

func (rep *parallelReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# modrun bench --parallel\n\n%s, %s, %d CPUs. `%s`\n\n", rep.Date, rep.Machine, rep.CPUs, rep.Command)
	fmt.Fprintf(&b, "Each sequence: a %d-token prompt, then %d tokens (%s); all start together on the backend's scheduler "+
		"(--batch-tokens %d); median of %d rounds by aggregate decode. Each sequence's greedy tokens were checked equal to its run alone first.\n\n",
		rep.Prompt, rep.Decode, rep.Sampling, rep.Batch, rep.Repeats)
	var names, tunings []string
	for _, r := range rep.Rows {
		names, tunings = append(names, fmt.Sprintf("%s (%s) on %s at --parallel %d", r.Model, r.Routing, r.Backend, r.Parallel)), append(tunings, r.Tuning)
	}
	b.WriteString(tuningNote(names, tunings))
	b.WriteString("| model | routing | backend | parallel | aggregate decode tok/s | x single | tok/s per sequence | x single | first token ms | x single |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.Rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f |\n", r.Model, r.Routing, r.Backend, r.Parallel,
			r.AggregateDecodeRate, r.AggregateVsSingle, r.PerSequenceDecodeRate, r.PerSequenceVsSingle, r.TimeToFirstToken, r.FirstTokenVsSingle)
	}
	return b.String()
}
