package modrun

import (
	"cmp"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/engine/grammar"
	"github.com/modrun/modrun/mod"
)

// OptionError is an option of Options or GenerateOptions that Open or
// Generate refuses, named by its field as a program writes it
// ("Temperature -1: must be 0 (greedy) or positive"); errors.As finds it
// in their errors. Named says the same with another name for the option:
// the command line's flag, a server's JSON field.
type OptionError = engine.OptionError

// check validates opts and turns them into engine's: the one check of
// Options (the engine's of the backend's fields, named as Options names
// them, and the API's own), a wrong field an *OptionError.
func (o Options) check() (engine.BackendOptions, mod.Routing, error) {
	bo := engine.BackendOptions{Name: cmp.Or(o.Backend, BackendAuto), Device: -1, ContextLen: o.ContextLen, KVType: o.KVType,
		Trace: !o.NoRoutes, Profile: o.Profile, UBatch: o.UBatch}
	bad := func(err error) (engine.BackendOptions, mod.Routing, error) {
		return bo, 0, fmt.Errorf("modrun: %w", err)
	}
	if err := bo.Check(); err != nil {
		if oe, ok := err.(*OptionError); ok && oe.Option == "Name" {
			oe.Option = "Backend" // BackendOptions.Name is Options.Backend
		}
		return bad(err)
	}
	switch {
	case o.Parallel < 0:
		return bad(&OptionError{Option: "Parallel", Value: fmt.Sprint(o.Parallel), Problem: ": must be 0 or positive (0 and 1: one session at a time)"})
	case o.KVBudget < 0:
		return bad(&OptionError{Option: "KVBudget", Value: fmt.Sprint(o.KVBudget), Problem: ": must be 0 (enough for the whole context) or positive"})
	}
	if o.Device != "" {
		d, err := strconv.Atoi(o.Device)
		if err != nil || d < 0 {
			return bad(&OptionError{Option: "Device", Value: strconv.Quote(o.Device), Problem: " is not a device index (modrun devices lists them)"})
		}
		bo.Device = d
	}
	routing := mod.RoutingRouter
	switch o.Routing {
	case "", RoutingRouter:
	case RoutingPredictor:
		routing = mod.RoutingPredictor
	default:
		return bad(&OptionError{Option: "Routing", Value: strconv.Quote(string(o.Routing)), Problem: " is not router or predictor"})
	}
	return bo, routing, nil
}

// Check validates o as Generate does before it runs anything, for a
// caller that must answer before it generates (a server's 400): a wrong
// field is an *OptionError naming it.
func (o GenerateOptions) Check() error {
	_, _, err := o.check()
	return err
}

// check is the one check of GenerateOptions: the sampler's options (o's
// fields with their zero values read as defaults, or o.Sampler as it is),
// checked by engine's SamplerOptions.Check; the limits and log
// probabilities; and the grammar, compiled from GrammarGBNF. A wrong field
// is an *OptionError.
func (o GenerateOptions) check() (engine.SamplerOptions, *Grammar, error) {
	so := engine.SamplerOptions{Temperature: o.Temperature, TopK: o.TopK, TopP: o.TopP, MinP: o.MinP,
		RepeatPenalty: o.RepeatPenalty, RepeatLastN: o.RepeatLastN, FrequencyPenalty: o.FrequencyPenalty,
		PresencePenalty: o.PresencePenalty, LogitBias: o.LogitBias, Seed: o.Seed}
	if o.Sampler != nil {
		so = *o.Sampler
	} else {
		if so.TopP == 0 {
			so.TopP = 1
		}
		if so.RepeatPenalty == 0 {
			so.RepeatPenalty = 1
		}
		switch {
		case so.RepeatLastN == 0:
			so.RepeatLastN = engine.DefaultSampler().RepeatLastN
		case so.RepeatLastN < 0:
			so.RepeatLastN = 0
		}
	}
	bad := func(err error) (engine.SamplerOptions, *Grammar, error) {
		return so, nil, fmt.Errorf("modrun: %w", err)
	}
	if o.MaxTokens < 0 {
		return bad(&OptionError{Option: "MaxTokens", Value: fmt.Sprint(o.MaxTokens), Problem: ": must be 0 (no limit) or positive"})
	}
	if o.TopLogProbs < 0 || o.TopLogProbs > MaxTopLogProbs {
		return bad(&OptionError{Option: "TopLogProbs", Value: fmt.Sprint(o.TopLogProbs), Problem: fmt.Sprintf(": must be in [0, %d]", MaxTopLogProbs)})
	}
	if err := so.Check(); err != nil {
		return bad(err)
	}
	for _, stop := range o.Stop {
		switch {
		case stop == "":
			return bad(&OptionError{Option: "Stop", Value: `""`, Problem: " is empty: give some text"})
		case !utf8.ValidString(stop): // it could match inside a character of the text and cut it
			return bad(&OptionError{Option: "Stop", Value: strconv.Quote(stop), Problem: " is not valid UTF-8"})
		}
	}
	g := o.Grammar
	switch {
	case g != nil && o.GrammarGBNF != "":
		return bad(&OptionError{Option: "GrammarGBNF", Problem: ": Grammar and GrammarGBNF are both set: give one"})
	case o.GrammarGBNF != "":
		var err error
		if g, err = grammar.Parse(o.GrammarGBNF); err != nil {
			return bad(&OptionError{Option: "GrammarGBNF", Problem: ": " + err.Error()})
		}
	}
	return so, g, nil
}
