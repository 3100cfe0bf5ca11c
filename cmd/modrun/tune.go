package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/modrun/modrun/bench"
	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
)

// modrun tune (docs/tuning.md): the Vulkan engine's measuring knobs
// (vulkan.Knobs), each timed on this device with this model against the
// knobs chosen so far, round by round in one run, every candidate
// validated against the CPU reference first; the fastest kept in the
// tuning file, which later runs of the model on the device take.

const tuneArgs = "-m FILE.gguf [--device N] [--ctx N] [--kv-type f16|f32] [--ubatch N] [--prompt N] [--short N] [-n N] [--rounds N] [--margin F] [--validate N] [--file FILE.json] [--dry-run] [--json]"

type tuneFlags struct {
	mf       modelFlags
	cache    cacheFlags
	prompt   int     // the prefill trials' prompt
	short    int     // the short-prompt trial's prompt
	n        int     // tokens decoded in every run
	rounds   int     // timed runs of each row in a trial
	margin   float64 // the least gain a knob must show to be taken
	validate int
	file     string
	dryRun   bool
	asJSON   bool
}

// tuneTrial is a knob to try: a value against the knobs chosen so far, on
// a workload, decided by a metric ("prefill" or "decode" tokens/s).
type tuneTrial struct {
	knob, value, metric string
	short               bool // the short prompt's workload
}

// tuneTrials are tried in order, each from the knobs the earlier ones
// chose. The prefill's kernels first (their gains compound: the direct
// matmul and the tensor-core attention run under the tensor-core matmul),
// then the decode step's kernels, its barriers and its chaining, then how a short
// prompt runs, then how many rows a batched step runs as matvecs. A
// value that a precision knob would change (MODRUN_TENSOR_CORES=f16) is
// never tried: tuning picks speed at the engine's own precision.
var tuneTrials = []tuneTrial{
	{knob: "MODRUN_TENSOR_CORES", value: "0", metric: "prefill"},
	{knob: "MODRUN_COOPMAT", value: "khr", metric: "prefill"}, // where a device has both extensions
	{knob: "MODRUN_MATMUL_PIPE", value: "0", metric: "prefill"},
	{knob: "MODRUN_MATMUL_DIRECT", value: "1", metric: "prefill"},
	{knob: "MODRUN_ATTENTION_COOP", value: "1", metric: "prefill"},
	{knob: "MODRUN_MATVEC_ROWS", value: "0", metric: "decode"},
	{knob: "MODRUN_ATTEND_KEYS", value: "0", metric: "decode"},
	{knob: "MODRUN_HANDOFF", value: "", metric: "decode"},                    // the other of the profile's choice
	{knob: "MODRUN_CHAIN", value: "1", metric: "decode"},                     // greedy steps one submission each
	{knob: "MODRUN_PROMPT_STEPS", value: "", metric: "prefill", short: true}, // the other of the runner's choice
	{knob: "MODRUN_VEC_ROWS", metric: "parallel"},                            // half the profile's VecRows, at VecRows sequences
	{knob: "MODRUN_ATTEND_OWN", value: "0", metric: "parallel"},              // paged_qkv and paged_attend apart, at VecRows sequences
}

// untunedKnobs are the knobs tune never tries: MODRUN_MATVEC_DOT=1
// quantizes the decode matvecs' x to 8 bits (the CPU backend's
// arithmetic, not f32's), a precision the user chooses.
var untunedKnobs = []string{"MODRUN_MATVEC_DOT"}

// tunedKnobs are vulkan.KnobNames less untunedKnobs: the knobs tune tries.
func tunedKnobs() []string {
	var out []string
	for _, k := range vulkan.KnobNames {
		if !slices.Contains(untunedKnobs, k) {
			out = append(out, k)
		}
	}
	return out
}

// tuneParallelPrompt is the parallel trial's prompt, as the GPU bundle's
// bench --parallel rows.
const tuneParallelPrompt = 32

func parseTuneFlags(args []string, stderr io.Writer) (*tuneFlags, error) {
	fs := newFlags("tune", tuneArgs, stderr)
	f := &tuneFlags{}
	fs.StringVar(&f.mf.path, "m", "", "model `FILE`.gguf to tune for")
	fs.IntVar(&f.mf.device, "device", -1, "Vulkan device `N`, as modrun devices lists them. -1: $MODRUN_DEVICE or the best")
	f.cache.register(fs)
	fs.IntVar(&f.prompt, "prompt", 512, "prompt tokens of the prefill and decode trials (at most the context less -n)")
	fs.IntVar(&f.short, "short", 5, "prompt tokens of the short-prompt trial (MODRUN_PROMPT_STEPS)")
	fs.IntVar(&f.n, "n", 32, "tokens decoded in each run")
	fs.IntVar(&f.rounds, "rounds", 5, "timed runs of each row in a trial, interleaved; the medians decide")
	fs.Float64Var(&f.margin, "margin", 0.03, "the least gain `F` (0.03: 3%) a knob must show on its metric to be taken")
	fs.IntVar(&f.validate, "validate", 8, "greedy tokens `N` of every row checked against the CPU reference before it is timed (fewer on a large model); 0 = none")
	fs.StringVar(&f.file, "file", "", "the tuning `FILE`.json to update (default: $MODRUN_TUNING, else modrun/tuning.json in the user's cache folder)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "measure and print, but write no tuning file")
	fs.BoolVar(&f.asJSON, "json", false, "print the tuning entry as JSON instead of the table")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if f.mf.path == "" {
		return nil, fmt.Errorf("%w: give a model: -m FILE.gguf", errUsage)
	}
	if err := inputFile("-m", f.mf.path); err != nil {
		return nil, err
	}
	if err := f.cache.check(); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		name string
		v    int
		min  int
	}{{"--prompt", f.prompt, 2}, {"--short", f.short, 2}, {"-n", f.n, 2}, {"--rounds", f.rounds, 1}, {"--validate", f.validate, 0}} {
		if c.v < c.min {
			return nil, fmt.Errorf("%w: %s %d: must be at least %d", errUsage, c.name, c.v, c.min)
		}
	}
	if f.margin < 0 || f.margin >= 1 {
		return nil, fmt.Errorf("%w: --margin %g: want a fraction in [0, 1)", errUsage, f.margin)
	}
	if f.file != "" {
		if err := outputFile("--file", f.file); err != nil {
			return nil, err
		}
	}
	for _, name := range tunedKnobs() { // a precision knob set (MODRUN_MATVEC_DOT) holds for every trial
		if v := os.Getenv(name); v != "" {
			return nil, fmt.Errorf("%w: %s=%s is set: tune measures each knob itself (unset it; what tune keeps, the environment still overrides later)", errUsage, name, v)
		}
	}
	return f, nil
}

// tuner is one tuning run's state.
type tuner struct {
	f       *tuneFlags
	m       *mod.Model
	prompt  []int32
	routing mod.Routing
	stderr  io.Writer
	info    vk.DeviceInfo
	base    vulkan.Knobs
	// rows are the base knobs' rows by prompt length, kept while the base
	// holds (a trial taken closes them).
	rows map[int]*tuneRow
}

// tuneRow is a backend open with some knobs, validated, ready to time.
type tuneRow struct {
	b      *engine.Backend
	k      *bench.Benchmark
	prompt int // its prompt's tokens: the one asked for, or less to fit the context
}

func (r *tuneRow) close() {
	if r != nil && r.b != nil {
		r.b.Close()
	}
}

func tuneMain(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	f, err := parseTuneFlags(args, stderr)
	if err != nil {
		return err
	}
	path := f.file
	if path == "" {
		path = vulkan.TuningPath()
	}
	if path == "" && !f.dryRun {
		return fmt.Errorf("%w: MODRUN_TUNING=off (or no cache folder): give --file FILE.json, or --dry-run", errUsage)
	}
	var tuning *vulkan.Tuning
	if !f.dryRun { // a bad file stops tune before the measuring, not after
		if tuning, err = vulkan.LoadTuning(path); err != nil {
			return err
		}
	}
	f.mf.backend, f.mf.routing = engine.BackendVulkan, "router"
	l, err := f.mf.load(mod.RoutingRouter, "")
	if err != nil {
		return err
	}
	defer l.model.Close()
	t := &tuner{f: f, m: l.model, stderr: stderr, base: vulkan.Knobs{}, rows: map[int]*tuneRow{}, routing: mod.RoutingRouter}
	if c := l.model.Config; c.IsMoD() && c.CausalRouting == mod.RoutingPredictor {
		t.routing = mod.RoutingPredictor // what the model was trained to route by
	}
	defer t.closeRows()
	longest := max(f.prompt, f.short, tuneParallelPrompt)
	if t.prompt, err = l.tok.Encode(strings.Repeat(benchText, 1+longest/30), true); err != nil {
		return err
	}
	first, err := t.row(f.prompt) // the device, and the base knobs' row
	if err != nil {
		return err
	}
	ri, ok := first.b.Runner.(interface{ DeviceInfo() vk.DeviceInfo })
	if !ok {
		return fmt.Errorf("tune: %s is not on a Vulkan device", first.b.Name)
	}
	t.info = ri.DeviceInfo()
	fmt.Fprintf(stderr, "tune: %s on %s (%s %s)\n", f.mf.path, t.info.Name, t.info.DriverName, t.info.DriverInfo)
	entry := vulkan.TuningEntry{TuningKey: vulkan.KeyOf(t.info, t.m), Date: time.Now().UTC().Format(time.RFC3339)}
	for _, tr := range tuneTrials {
		res, err := t.try(tr)
		if err != nil {
			return err
		}
		entry.Trials = append(entry.Trials, res)
		if res.Chosen { // try left the candidate's row as the new base's (the others closed)
			t.base = t.base.With(res.Knob, res.Value)
		}
	}
	entry.Knobs = t.base
	if !f.dryRun {
		tuning.Put(entry)
		if err := tuning.Save(path); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "tune: wrote %s\n", path)
	}
	return writeReport(stdout, f.asJSON, entry, tuneMarkdown(entry, path, f.dryRun))
}

// promptFor is a trial's prompt length: the short one, the parallel
// trial's, or --prompt (open fits it within the context less the decoded
// tokens).
func (t *tuner) promptFor(tr tuneTrial) int {
	switch {
	case tr.short:
		return t.f.short
	case tr.metric == "parallel":
		return tuneParallelPrompt
	}
	return t.f.prompt
}

// row is the base knobs' row at prompt tokens, opened on first use.
func (t *tuner) row(prompt int) (*tuneRow, error) {
	if r := t.rows[prompt]; r != nil {
		return r, nil
	}
	r, err := t.open(t.base, prompt)
	if err != nil {
		return nil, fmt.Errorf("tune: %s with %s: %w", t.f.mf.path, t.base, err)
	}
	t.rows[prompt] = r
	return r, nil
}

func (t *tuner) closeRows() {
	for p, r := range t.rows {
		r.close()
		delete(t.rows, p)
	}
}

// open opens the model on the device with knobs k and validates it, as
// bench's rows are (bench.NewBenchmark).
func (t *tuner) open(k vulkan.Knobs, prompt int) (*tuneRow, error) {
	bo := engine.BackendOptions{Name: engine.BackendVulkan, Device: t.f.mf.device, Knobs: k}
	if err := t.f.cache.options(&bo, t.m); err != nil {
		return nil, err
	}
	b, _, err := engine.OpenBackend(t.m, t.routing, bo)
	if err != nil {
		return nil, err
	}
	if plantTuneError != nil {
		b.Runner = plantTuneError(k, b.Runner)
	}
	o := bench.Options{PromptTokens: prompt, DecodeTokens: t.f.n, Repeats: t.f.rounds, ValidateTokens: t.f.validate}
	if ctx := b.ContextLen(); o.PromptTokens+max(o.DecodeTokens, o.ValidateTokens) > ctx {
		o.PromptTokens = ctx - max(o.DecodeTokens, o.ValidateTokens)
		if o.PromptTokens < 2 {
			b.Close()
			return nil, fmt.Errorf("a context of %d tokens leaves no prompt beside -n %d and --validate %d", ctx, o.DecodeTokens, o.ValidateTokens)
		}
	}
	o = bench.ValidationFor(o, bench.Params(t.m))
	k2, err := bench.NewBenchmark(b, t.m, t.routing, t.prompt, o)
	if err != nil {
		b.Close()
		return nil, err
	}
	return &tuneRow{b: b, k: k2, prompt: o.PromptTokens}, nil
}

// plantTuneError, set by a test only, wraps the runner of each row tune
// opens with its knobs (a candidate with a planted error must fail its
// validation and never be taken).
var plantTuneError func(vulkan.Knobs, engine.Runner) engine.Runner

// try runs one trial: the base knobs' row against the candidate's, round
// by round.
func (t *tuner) try(tr tuneTrial) (vulkan.TuningTrial, error) {
	p, err := vulkan.ProfileWith(t.info, t.base)
	if err != nil {
		return vulkan.TuningTrial{}, err
	}
	value, parallel := tr.value, 0
	switch tr.knob {
	case "MODRUN_HANDOFF": // the other of what the profile does
		value = map[bool]string{true: "0", false: "1"}[p.Handoff]
	case "MODRUN_VEC_ROWS": // a step of the profile's most rows as matvecs, or as the matmul
		parallel, value = p.VecRows(), fmt.Sprint(p.VecRows()/2)
	case "MODRUN_ATTEND_OWN": // decoding sequences' steps, on the matvec path where paged_attend_own serves
		parallel = p.VecRows()
	case "MODRUN_PROMPT_STEPS": // the other of the runner's choice: one prefill, or decode steps
		if value != "" {
			break
		}
		base, err := t.row(t.promptFor(tr))
		if err != nil {
			return vulkan.TuningTrial{}, err
		}
		value = "1"
		if ps, ok := base.b.Runner.(interface{ PromptSteps() int }); ok && ps.PromptSteps() <= 1 {
			value = fmt.Sprint(vulkan.DefaultPromptSteps)
		}
	}
	cand := t.base.With(tr.knob, value)
	res := vulkan.TuningTrial{Knob: tr.knob, Value: value, Base: t.base, Metric: tr.metric, Prompt: t.promptFor(tr), Parallel: parallel}
	differ, err := vulkan.KnobsDiffer(t.info, t.base, cand)
	if err != nil {
		return res, err
	}
	if !differ {
		res.Why = "no effect on this device"
		fmt.Fprintf(t.stderr, "tune: %s=%s: %s\n", tr.knob, value, res.Why)
		return res, nil
	}
	if parallel > 0 {
		return t.tryParallel(res, cand)
	}
	want := res.Prompt // the rows' key; res.Prompt becomes what they run
	base, err := t.row(want)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(t.stderr, "tune: %s=%s: validating\n", tr.knob, value)
	c, err := t.open(cand, want)
	if err != nil {
		return t.failed(res, err), nil
	}
	defer func() { c.close() }() // not when it became the base (c nil)
	res.Prompt = base.prompt
	base.k.Reset()
	for i := 0; i < t.f.rounds; i++ {
		for _, r := range []*tuneRow{base, c} {
			if err := r.k.Time(); err != nil {
				if r == base {
					return res, fmt.Errorf("tune: %s with %s: %w", t.f.mf.path, t.base, err)
				}
				return t.failed(res, err), nil
			}
		}
	}
	b, cr := base.k.Result(), c.k.Result()
	res.BasePrefill, res.BaseDecode, res.Prefill, res.Decode = b.PrefillRate, b.DecodeRate, cr.PrefillRate, cr.DecodeRate
	bp, bd := base.k.Rates()
	cp, cd := c.k.Rates()
	if res.Metric == "decode" {
		bp, bd, cp, cd = bd, bp, cd, cp // the metric's rates first
	}
	res.Rounds, res.Wins, res.Gain = paired(bp, cp)
	_, _, res.Other = paired(bd, cd)
	res.Chosen, res.Why = decideTrial(res, t.f.margin)
	fmt.Fprintf(t.stderr, "tune: %s=%s: %s\n", tr.knob, value, res.Why)
	if res.Chosen { // the candidate's row is the new base's at this prompt
		t.closeRows()
		t.rows[want] = c
		c = nil
	}
	return res, nil
}

// failed is res with a candidate's failure (to open, validate or run):
// never taken, and the run goes on to the next knob.
func (t *tuner) failed(res vulkan.TuningTrial, err error) vulkan.TuningTrial {
	res.Why = "failed: " + err.Error()
	fmt.Fprintf(t.stderr, "tune: %s=%s: %s\n", res.Knob, res.Value, res.Why)
	return res
}

// tryParallel times the base knobs against cand on res.Parallel
// sequences at once (bench --parallel's workload: the batched steps),
// each checked against its tokens alone first (bench.NewParallel).
func (t *tuner) tryParallel(res vulkan.TuningTrial, cand vulkan.Knobs) (vulkan.TuningTrial, error) {
	o := bench.Options{PromptTokens: res.Prompt, DecodeTokens: t.f.n}
	bo := engine.BackendOptions{Name: engine.BackendVulkan, Device: t.f.mf.device, KVType: t.f.cache.kvType, Knobs: t.base}
	t.closeRows() // the one stream's rows: their memory to the parallel ones
	base, err := bench.NewParallel(t.m, t.routing, t.prompt, o, res.Parallel, 0, bo)
	if err != nil {
		return res, fmt.Errorf("tune: %s with %s, %d sequences: %w", t.f.mf.path, t.base, res.Parallel, err)
	}
	defer base.Close()
	fmt.Fprintf(t.stderr, "tune: %s=%s: %d sequences, validating\n", res.Knob, res.Value, res.Parallel)
	bo.Knobs = cand
	c, err := bench.NewParallel(t.m, t.routing, t.prompt, o, res.Parallel, 0, bo)
	if err != nil {
		return t.failed(res, err), nil
	}
	defer c.Close()
	for i := 0; i < t.f.rounds; i++ {
		if err := base.Time(); err != nil {
			return res, fmt.Errorf("tune: %s with %s, %d sequences: %w", t.f.mf.path, t.base, res.Parallel, err)
		}
		if err := c.Time(); err != nil {
			return t.failed(res, err), nil
		}
	}
	res.BaseDecode, res.Decode = base.Result().AggregateDecodeRate, c.Result().AggregateDecodeRate
	aggregate := func(rounds []bench.ParallelResult) []float64 {
		var r []float64
		for _, x := range rounds {
			r = append(r, x.AggregateDecodeRate)
		}
		return r
	}
	res.Rounds, res.Wins, res.Gain = paired(aggregate(base.Rounds()), aggregate(c.Rounds()))
	res.Other = 1
	res.Chosen, res.Why = decideTrial(res, t.f.margin)
	fmt.Fprintf(t.stderr, "tune: %s=%s: %s\n", res.Knob, res.Value, res.Why)
	return res, nil
}

// decideTrial is tuneDecide; a test replaces it to take every candidate.
var decideTrial = tuneDecide

// paired compares rounds run in pairs, base then candidate: how many
// pairs, in how many the candidate was faster, and the median of the
// candidate's rate over its base's.
func paired(base, cand []float64) (rounds, wins int, gain float64) {
	var ratios []float64
	for i := range min(len(base), len(cand)) {
		if base[i] <= 0 {
			continue
		}
		r := cand[i] / base[i]
		ratios = append(ratios, r)
		if r > 1 {
			wins++
		}
	}
	if len(ratios) == 0 {
		return 0, 0, 0
	}
	sort.Float64s(ratios)
	return len(ratios), wins, ratios[len(ratios)/2]
}

// tuneWins is the fewest of n rounds a candidate must win: four in five
// (all of up to 4 rounds), so that one noisy round in five cannot
// decide, and a candidate no faster than its base (each round a coin
// toss) is taken by chance at most 3 times in 16 with 5 rounds.
func tuneWins(n int) int { return (4*n + 4) / 5 }

// tuneDecide takes a candidate whose metric beats the base's by margin or
// more, in the median of the rounds' ratios and in tuneWins of the
// rounds, unless its other rate falls by more than twice the margin (a
// knob for one phase that costs the other more than noise).
func tuneDecide(tr vulkan.TuningTrial, margin float64) (bool, string) {
	other := "decode"
	switch tr.Metric {
	case "decode":
		other = "prefill"
	case "parallel":
		other = ""
	}
	figures := fmt.Sprintf("%s %.3fx, faster in %d of %d rounds", tr.Metric, tr.Gain, tr.Wins, tr.Rounds)
	if other != "" {
		figures += fmt.Sprintf("; %s %.3fx", other, tr.Other)
	}
	switch {
	case tr.Rounds == 0:
		return false, "no rounds timed"
	case tr.Gain < 1+margin:
		return false, fmt.Sprintf("%s: under the %.0f%% margin", figures, 100*margin)
	case tr.Wins < tuneWins(tr.Rounds):
		return false, fmt.Sprintf("%s: fewer than %d rounds", figures, tuneWins(tr.Rounds))
	case other != "" && tr.Other < 1-2*margin:
		return false, fmt.Sprintf("%s: %s worse by more than %.0f%%", figures, other, 200*margin)
	default:
		return true, figures + ": taken"
	}
}

// tuneMarkdown is tune's report: the key, each trial, the knobs kept.
func tuneMarkdown(e vulkan.TuningEntry, path string, dryRun bool) string {
	var s strings.Builder
	fmt.Fprintf(&s, "# modrun tune, %s\n\n", e.Date)
	fmt.Fprintf(&s, "- device: %s (vendor 0x%04x, device 0x%04x), driver %s\n", e.Device, e.VendorID, e.DeviceID, e.Driver)
	fmt.Fprintf(&s, "- model: %s\n- kernels: %s\n\n", e.Model, e.Build)
	s.WriteString("| knob | value | from | metric | prompt | base prefill tok/s | prefill tok/s | base decode tok/s | decode tok/s | taken | why |\n")
	s.WriteString("|---|---|---|---|--:|--:|--:|--:|--:|---|---|\n")
	rate := func(v float64) string {
		if v == 0 {
			return ""
		}
		return fmt.Sprintf("%.1f", v)
	}
	for _, tr := range e.Trials {
		metric := tr.Metric
		if tr.Parallel > 0 {
			metric = fmt.Sprintf("%s, %d sequences", tr.Metric, tr.Parallel)
		}
		fmt.Fprintf(&s, "| %s | %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", tr.Knob, tr.Value, tr.Base, metric, tr.Prompt,
			rate(tr.BasePrefill), rate(tr.Prefill), rate(tr.BaseDecode), rate(tr.Decode), map[bool]string{true: "yes", false: "no"}[tr.Chosen],
			strings.ReplaceAll(tr.Why, "|", "/"))
	}
	fmt.Fprintf(&s, "\nkept: %s\n", e.Knobs)
	switch {
	case dryRun:
		s.WriteString("(--dry-run: no tuning file written)\n")
	default:
		fmt.Fprintf(&s, "written to %s: runs of this model on this device take these knobs (the environment's variables override them; MODRUN_TUNING=off ignores the file)\n", path)
	}
	return s.String()
}
