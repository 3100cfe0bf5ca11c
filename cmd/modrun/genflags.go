package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	api "github.com/modrun/modrun"
	"github.com/modrun/modrun/engine"
)

// generationFlags are the flags of the commands that generate through the
// API (run, chat): model, cache and sampling.
type generationFlags struct {
	mf modelFlags
	cf cacheFlags
	sf samplingFlags
}

func (gf *generationFlags) register(fs *flag.FlagSet) {
	gf.mf.register(fs, "", "causal routing of MoD blocks: router (r > 0) | predictor (p > 0) (default: the one the model was trained for, llama-mod.mod.causal_routing, else router)")
	gf.cf.register(fs)
	gf.sf.register(fs)
}

// open checks the flags and opens the model, with set adjusting the API's
// options first; it prints the API's notice (the CPU fallback) to stderr.
func (gf *generationFlags) open(fs *flag.FlagSet, stderr io.Writer, set func(*api.Options)) (*api.Model, engine.SamplerOptions, error) {
	so, err := gf.sf.options()
	if err != nil {
		return nil, so, err
	}
	if err := gf.cf.check(); err != nil { // usage errors before -m's file
		return nil, so, err
	}
	opts, err := gf.mf.options()
	if err != nil {
		return nil, so, err
	}
	if err := gf.cf.apiOptions(&opts); err != nil {
		return nil, so, err
	}
	set(&opts)
	model, err := gf.mf.open(opts, flagSet(fs, "routing"))
	if err != nil {
		return nil, so, err
	}
	if notice := model.Info().Notice; notice != "" {
		fmt.Fprintln(stderr, notice)
	}
	return model, so, nil
}

// samplingFlags are the sampling flags of the commands that generate.
type samplingFlags struct {
	so   engine.SamplerOptions
	seed int64
}

func (sf *samplingFlags) register(fs *flag.FlagSet) {
	sf.so = engine.DefaultSampler()
	so := &sf.so
	fs.Func("temp", "sampling temperature `T` (0 = greedy, the default)", floatFlag(&so.Temperature))
	fs.IntVar(&so.TopK, "top-k", 0, "keep the `K` most likely tokens (0 = all)")
	fs.Func("top-p", "keep the most likely tokens up to probability `P` (default 1 = all)", floatFlag(&so.TopP))
	fs.Func("min-p", "drop tokens less likely than `P` times the best (default 0 = none)", floatFlag(&so.MinP))
	fs.Func("repeat-penalty", "penalty `R` on the last --repeat-last-n tokens (default 1 = off)", floatFlag(&so.RepeatPenalty))
	fs.IntVar(&so.RepeatLastN, "repeat-last-n", so.RepeatLastN, "tokens the repetition penalty looks back at")
	fs.Int64Var(&sf.seed, "seed", -1, "random seed; -1 picks one from the clock (printed with --stats)")
}

// options checks the flags; a seed of -1 becomes one from the clock.
func (sf *samplingFlags) options() (engine.SamplerOptions, error) {
	so := sf.so
	seed := sf.seed
	if seed < -1 {
		return sf.so, fmt.Errorf("%w: --seed %d: want 0 or more, or -1 for one from the clock", errUsage, seed)
	}
	if seed == -1 {
		seed = time.Now().UnixNano() & (1<<62 - 1)
	}
	so.Seed = uint64(seed)
	if err := so.Check(); err != nil {
		return so, fmt.Errorf("%w: %v", errUsage, err)
	}
	return so, nil
}

// generateOptions are the API's options for sampler so and at most n new
// tokens.
func generateOptions(so engine.SamplerOptions, n int) api.GenerateOptions {
	lastN := so.RepeatLastN
	if lastN == 0 { // the API's 0 means 64
		lastN = -1
	}
	return api.GenerateOptions{MaxTokens: n, Temperature: so.Temperature, TopK: so.TopK, TopP: so.TopP, MinP: so.MinP,
		RepeatPenalty: so.RepeatPenalty, RepeatLastN: lastN, Seed: so.Seed}
}
