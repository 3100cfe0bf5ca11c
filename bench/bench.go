package bench

import (
	"context"
	"fmt"
	"sort"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/mod"
)

// Options size one benchmark: modrun bench's --prompt, -n, --repeats and
// --validate.
type Options struct {
	PromptTokens int // tokens prefilled
	DecodeTokens int // tokens decoded after the prompt
	Repeats      int // runs timed; the median is reported
	// ValidateTokens greedy tokens are checked against the CPU reference
	// before anything is timed, by the statistics of their next-token
	// distributions (validate.go), after the first ValidatePrompt tokens of
	// the prompt (0: all of it). A large model validates fewer: the CPU
	// reference is slow (ValidationFor). ValidateTokens 0 validates nothing.
	ValidateTokens int
	ValidatePrompt int
	// KVElemBytes is the size of a KV cache element on the backend, for
	// the decode traffic; 0 means the backend's (2 for an F16 cache, 4 for F32).
	KVElemBytes int
	// Sampler draws the decoded tokens (modrun bench's --temp, --top-k,
	// --top-p, --min-p); nil: greedy, the runner's argmax. Sequence i of
	// --parallel draws with Seed + i.
	Sampler *engine.SamplerOptions
}

// Sampling says how o's decoded tokens are drawn, for a report.
func (o Options) Sampling() string {
	if o.Sampler == nil {
		return "greedy"
	}
	s := *o.Sampler
	what := fmt.Sprintf("sampled at temperature %g, top-k %d, top-p %g, min-p %g", s.Temperature, s.TopK, s.TopP, s.MinP)
	if s.RepeatPenalty != 1 {
		what += fmt.Sprintf(", repeat penalty %g", s.RepeatPenalty)
	}
	return what
}

// sampler is sequence i's sampler options.
func (o Options) sampler(i int) engine.SamplerOptions {
	if o.Sampler == nil {
		return engine.DefaultSampler()
	}
	s := *o.Sampler
	s.Seed += uint64(i)
	return s
}

// validationFLOPs bounds the CPU reference's work when validating one row:
// a few seconds to a minute on a small machine.
const validationFLOPs = 4e11

// ValidationFor sets o's validation length for a model of params weights:
// ValidateTokens decoded after ValidatePrompt prompt tokens, as many as
// fit validationFLOPs of CPU reference work, at most the whole prompt and
// o.ValidateTokens, and never fewer than 4 tokens in all.
func ValidationFor(o Options, params int64) Options {
	o.ValidatePrompt = o.PromptTokens
	if o.ValidateTokens == 0 {
		return o
	}
	total := max(4, int(validationFLOPs/(2*float64(params))))
	if total >= o.PromptTokens+o.ValidateTokens {
		return o
	}
	o.ValidateTokens = min(o.ValidateTokens, max(1, total/2))
	o.ValidatePrompt = max(1, min(o.PromptTokens, total-o.ValidateTokens))
	return o
}

// Params is the number of weights in m's tensors.
func Params(m *mod.Model) int64 {
	var n int64
	for _, t := range m.File.Tensors {
		n += int64(t.Elements())
	}
	return n
}

// Result is one model on one backend.
type Result struct {
	Backend        string  `json:"backend"`
	PrefillRate    float64 `json:"prefill_tokens_per_s"`   // tokens/s, median over repeats
	DecodeRate     float64 `json:"decode_tokens_per_s"`    // tokens/s, median over repeats
	ValidatePrompt int     `json:"validate_prompt_tokens"` // prompt tokens fed while validating
	ValidateTokens int     `json:"validate_tokens"`        // greedy tokens validated after them (0: not validated)
	// Validation is what validating showed against the CPU reference,
	// within the tolerance of Tolerance's path (ValidationTolerance.Path).
	Validation ValidationStats `json:"validation"`
	Tolerance  string          `json:"validation_tolerance"`
	KVType     string          `json:"kv_type"` // the KV cache's element type: "f16" or "f32"
	// SampledOnDevice: the timed decode samples (Options.Sampler) with a
	// plain temperature on a backend that draws it on the device
	// (engine.Sampler.Plain, engine.Backend.DrawsOnDevice); false when it
	// draws on the host, or is greedy.
	SampledOnDevice bool      `json:"sampled_on_device"`
	RoutedPercent   []float64 `json:"routed_percent"`
	// Traffic is what a decode token reads at the mean context of the
	// timed decode, with the routed shares seen; EffectiveGBps is that
	// times DecodeRate, in 1e9 bytes/s.
	Traffic       DecodeTraffic `json:"decode_traffic"`
	EffectiveGBps float64       `json:"effective_gbps"`
	// PrefillFLOPs is the arithmetic of a prompt token at the prompt's
	// mean position (mod.Model.FLOPsPerToken), with the routed shares seen.
	PrefillFLOPs float64 `json:"prefill_flops_per_token"`
}

// Benchmark is one model on one backend, validated against the CPU
// reference and then timed one run at a time, so that a caller comparing
// several can interleave their runs round by round: load on a shared
// machine then falls on every row alike instead of on whichever row ran
// while it lasted.
type Benchmark struct {
	b               *engine.Backend
	m               *mod.Model
	routing         mod.Routing
	prompt          []int32
	o               Options
	res             Result
	prefill, decode []float64
	warm            bool // the untimed run is done
}

// NewBenchmark checks the options and validates b against the CPU
// reference (validate.go); a backend whose results no rounding of its path
// explains is an error and is never timed.
func NewBenchmark(b *engine.Backend, m *mod.Model, routing mod.Routing, prompt []int32, o Options) (*Benchmark, error) {
	if o.ValidatePrompt <= 0 || o.ValidatePrompt > o.PromptTokens {
		o.ValidatePrompt = o.PromptTokens
	}
	f16 := false
	if k, ok := b.Runner.(interface{ KVType() string }); ok {
		f16 = k.KVType() == "f16"
	}
	if o.KVElemBytes == 0 {
		o.KVElemBytes = 4
		if f16 {
			o.KVElemBytes = 2
		}
	}
	kv := "f32"
	if f16 {
		kv = "f16"
	}
	k := &Benchmark{b: b, m: m, routing: routing, o: o,
		res: Result{Backend: b.Name, ValidatePrompt: o.ValidatePrompt, ValidateTokens: o.ValidateTokens, KVType: kv}}
	if o.Sampler != nil && b.DrawsOnDevice() {
		if s, err := engine.NewSampler(*o.Sampler); err == nil {
			_, k.res.SampledOnDevice = s.Plain()
		}
	}
	if len(prompt) < o.PromptTokens || o.PromptTokens < 1 {
		return k, fmt.Errorf("bench: needs a prompt of %d tokens, got %d", o.PromptTokens, len(prompt))
	}
	k.prompt = prompt[:o.PromptTokens]
	if o.PromptTokens+max(o.DecodeTokens, o.ValidateTokens) > b.ContextLen() {
		return k, fmt.Errorf("bench: %d prompt + %d decoded tokens pass the context length %d", o.PromptTokens, o.DecodeTokens, b.ContextLen())
	}
	if o.ValidateTokens == 0 {
		return k, nil
	}
	ref, err := engine.NewCPU(m, routing)
	if err != nil {
		return k, err
	}
	tol := toleranceFor(b.Runner, m)
	k.res.Tolerance = tol.Path
	k.res.Validation, err = validate(b.Runner, ref, k.prompt[:o.ValidatePrompt], o.ValidateTokens, tol)
	return k, err
}

// Time runs the benchmark once: the prompt, then o.DecodeTokens tokens
// (greedy unless o.Sampler), through the generation loop the API runs. The first call runs
// the prompt and two tokens untimed before: a runner's first run of a
// prompt length records its work (the Vulkan runner's chunk) and fills
// the caches, which validation does only when it feeds the whole prompt
// (not with --validate 0, nor a large model's shorter one), and a cold
// run among the timed ones pulls the median down (a router model's
// 64-token prefill on lavapipe: 1040-1160 tok/s cold, 1400-2235 warm).
func (k *Benchmark) Time() error {
	if !k.warm {
		if _, err := generate(k.b, k.m.Config.NVocab, k.prompt, min(2, k.o.DecodeTokens), k.o.sampler(0)); err != nil {
			return err
		}
		k.warm = true
	}
	r, err := generate(k.b, k.m.Config.NVocab, k.prompt, k.o.DecodeTokens, k.o.sampler(0))
	if err != nil {
		return err
	}
	k.prefill, k.decode = append(k.prefill, r.PrefillRate()), append(k.decode, r.DecodeRate())
	return nil
}

// Rates are the timed runs' prefill and decode tokens/s, in the order run.
func (k *Benchmark) Rates() (prefill, decode []float64) { return k.prefill, k.decode }

// Reset forgets the timed runs (the warm-up stays done): the next Result
// is of the runs after it (modrun tune times one row against several).
func (k *Benchmark) Reset() { k.prefill, k.decode = nil, nil }

// Result gives the medians of the timed runs so far (zero before the first)
// and, for a MoD model, the share of tokens each routed layer took in the last.
func (k *Benchmark) Result() Result {
	res := k.res
	if len(k.decode) > 0 {
		res.PrefillRate, res.DecodeRate = median(k.prefill), median(k.decode)
	}
	if len(k.decode) == 0 {
		return res
	}
	var routed []float64 // [NLayer] share of the tokens each routed layer took
	if rs, ok := k.b.Runner.(engine.RoutingStatser); ok && k.m.Config.IsMoD() {
		routed = make([]float64, k.m.Config.NLayer)
		for _, s := range rs.RoutingStats() {
			routed[s.Layer] = float64(s.Selected) / float64(max(1, s.Seen))
			res.RoutedPercent = append(res.RoutedPercent, 100*routed[s.Layer])
		}
	}
	meanCtx := float64(k.o.PromptTokens) + float64(k.o.DecodeTokens)/2
	res.Traffic = DecodeTrafficOf(k.m, k.routing, routed, meanCtx, k.o.KVElemBytes)
	res.EffectiveGBps = res.Traffic.Total() * res.DecodeRate / 1e9
	res.PrefillFLOPs = k.m.FLOPsPerToken(k.routing, routed, k.o.PromptTokens/2)
	return res
}

func median(x []float64) float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// generate runs prompt as a fresh sequence on b's runner, then decodes n
// tokens drawn by so with no EOS: through the generation loop that modrun and
// the API run with one sequence at a time (engine.Loop over the runner's
// own steps). It is bench's one call into
// engine's generation loop, so that a change of that loop is one edit
// here: Benchmark.Time times it, and NewParallel takes each sequence's
// tokens alone from it.
func generate(b *engine.Backend, nVocab int, prompt []int32, n int, so engine.SamplerOptions) (engine.Result, error) {
	return engine.Generate(context.Background(), b, nVocab, prompt,
		engine.GenerateOptions{MaxTokens: n, EOS: -1, Sampler: so})
}
