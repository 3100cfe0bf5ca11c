package main

import (
	"errors"
	"fmt"

	"github.com/modrun/modrun/engine"
)

// optionFlags is the flag of each option the API's and engine's checks
// name by its field (engine.OptionError): the command line fills those
// options from its flags and says their errors in its own words. The
// ranges live with the checks, not here.
var optionFlags = map[string]string{
	// engine.BackendOptions, and the API's Options.
	"Name":       "backend",
	"Backend":    "backend",
	"Backends":   "backends",
	"Device":     "device",
	"ContextLen": "ctx",
	"UBatch":     "ubatch",
	"KVType":     "kv-type",
	"Routing":    "routing",
	"Parallel":   "parallel",
	// engine.PerplexityOptions.
	"Window":   "ctx",
	"Capacity": "capacity",
	// engine.SamplerOptions, and the API's GenerateOptions.
	"MaxTokens":        "n",
	"Temperature":      "temp",
	"TopK":             "top-k",
	"TopP":             "top-p",
	"MinP":             "min-p",
	"RepeatPenalty":    "repeat-penalty",
	"RepeatLastN":      "repeat-last-n",
	"FrequencyPenalty": "frequency-penalty",
	"PresencePenalty":  "presence-penalty",
	"Stop":             "stop",
}

// flagError is an error of the API's or engine's checks of the options as
// the command line says it: an *engine.OptionError is a usage error naming
// the option's flag. An option without a flag keeps its field's name.
func flagError(err error) error {
	var oe *engine.OptionError
	if !errors.As(err, &oe) {
		return err
	}
	name := oe.Option
	if flag, ok := optionFlags[oe.Option]; ok {
		name = dashed(flag)
	}
	return fmt.Errorf("%w: %s", errUsage, oe.Named(name))
}
