package engine

import (
	"fmt"
	"os"
	"strings"

	"github.com/modrun/modrun/engine/cpu"
	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// Backend names, as --backend takes them.
const (
	BackendAuto      = "auto"      // a Vulkan GPU when there is one, else the CPU
	BackendCPU       = "cpu"       // the fast CPU runner (engine/cpu): all cores, 8-bit activations, SIMD
	BackendReference = "reference" // mod's reference forward pass: plain float32 loops, the oracle
	BackendVulkan    = "vulkan"    // any Vulkan device, lavapipe included
)

// backendNames lists the backends for error messages.
const backendNames = "auto, cpu, reference or vulkan"

// BackendOptions choose where a model runs.
type BackendOptions struct {
	Name   string // BackendAuto, BackendCPU, BackendReference or BackendVulkan
	Device int    // a Vulkan device index (--device); -1 = $MODRUN_DEVICE or the best
	// Profile times every GPU command (vulkan.Options.Profile); the
	// backend's Runner is then a Profiler. Ignored on the CPU.
	Profile bool
	// UBatch is the longest chunk of a batched prompt on Vulkan and on the
	// CPU (vulkan.Options.UBatch, cpu.Options.UBatch, --ubatch); 0 = the
	// backend's default (DefaultUBatch, DefaultCPUUBatch).
	UBatch int
	// ContextLen is the longest sequence a Runner takes, and so the size
	// of its KV caches (--ctx); 0 means the model's context length, at most
	// DefaultMaxContext. More than the model's is an error.
	ContextLen int
	// KVType is the KV cache's element type, "f16" or "f32" (--kv-type);
	// "" means the backend's default: on Vulkan f16 on a GPU and f32 on a
	// CPU emulation, f32 on the CPU backend (whose output then equals the
	// reference's to rounding). The reference backend's cache is always
	// f32.
	KVType string
	// Trace makes the backend's Runner a RoutingTracer on Vulkan too (the
	// CPU always is): each token's routing is copied back from the GPU.
	Trace bool
	// Knobs set the Vulkan engine's measuring knobs (vulkan.Knobs; the
	// environment's variables over them); nil means the tuning file's for
	// the model and device, if it has them (vulkan.TunedKnobs: what
	// `modrun tune` measured), and an empty Knobs none of it. Ignored on
	// the CPU.
	Knobs vulkan.Knobs
}

// knobsFor are the knobs of a runner of m on dev: o.Knobs, or the tuning
// file's (and the file; "" where none apply).
func (o BackendOptions) knobsFor(dev *vk.Device, m *mod.Model) (vulkan.Knobs, string, error) {
	if o.Knobs != nil {
		return o.Knobs, "", nil
	}
	k, path, err := vulkan.TunedKnobs(dev.Info(), m)
	if err != nil {
		return nil, "", fmt.Errorf("engine: %w", err)
	}
	return k, path, nil
}

// DefaultUBatch is the longest prompt batch on Vulkan when
// BackendOptions.UBatch is 0.
const DefaultUBatch = vulkan.DefaultUBatch

// DefaultCPUUBatch is the longest prompt batch on the CPU backend when
// BackendOptions.UBatch is 0.
const DefaultCPUUBatch = cpu.DefaultUBatch

// DefaultMaxContext caps the default context length (BackendOptions): a
// model made for long contexts (Llama-2: 4096 tokens, F32 KV cache of 2 GiB)
// takes no more memory than that unless asked.
const DefaultMaxContext = 4096

// contextLen is the context length o asks for with model m.
func (o BackendOptions) contextLen(m *mod.Model) (int, error) {
	if err := o.CheckFor(m.Config); err != nil {
		return 0, fmt.Errorf("engine: %w", err)
	}
	if o.ContextLen > 0 {
		return o.ContextLen, nil
	}
	return min(m.Config.ContextLen, DefaultMaxContext), nil
}

// CheckFor checks what o asks of a model with config c, after Check: a
// context length no longer than the model's. It is the one check of the
// options against a model (OpenBackend, the API's Open and the command
// line call it); a wrong field is an *OptionError naming it.
func (o BackendOptions) CheckFor(c mod.Config) error {
	if o.ContextLen < 0 || o.ContextLen > c.ContextLen {
		return &OptionError{Option: "ContextLen", Value: fmt.Sprint(o.ContextLen),
			Problem: fmt.Sprintf(": must be in [1, %d] (the context length of the model)", c.ContextLen)}
	}
	return nil
}

// namedDevice says whether o (Device) or $MODRUN_DEVICE names a Vulkan
// device: then BackendAuto means that device, and failing to open it is an
// error naming the flag or the variable, not a fallback to the CPU.
func (o BackendOptions) namedDevice() bool {
	return o.Device >= 0 || strings.TrimSpace(os.Getenv(vk.EnvDevice)) != ""
}

// Check validates o's fields on their own (ContextLen against a model is
// CheckFor's): the one check of the options behind the API's Options
// and the command line's flags. A wrong field is an *OptionError naming
// the field; the command line says it by its flag (OptionError.Named).
func (o BackendOptions) Check() error {
	switch o.Name {
	case BackendAuto, BackendCPU, BackendReference, BackendVulkan:
	default:
		return &OptionError{Option: "Name", Value: fmt.Sprintf("%q", o.Name), Problem: " is not " + backendNames}
	}
	if o.Device < -1 {
		return &OptionError{Option: "Device", Value: fmt.Sprint(o.Device),
			Problem: ": want a device index, 0 or more (modrun devices lists them), or -1 for the default"}
	}
	if o.ContextLen < 0 {
		return &OptionError{Option: "ContextLen", Value: fmt.Sprint(o.ContextLen), Problem: ": must be positive (or 0: the model's)"}
	}
	if o.UBatch < 0 {
		return &OptionError{Option: "UBatch", Value: fmt.Sprint(o.UBatch), Problem: ": must be positive (or 0: the backend's default)"}
	}
	if _, err := shaders.ParseKV(o.KVType); err != nil {
		return &OptionError{Option: "KVType", Value: fmt.Sprintf("%q", o.KVType), Problem: " is not f16 or f32"}
	}
	return nil
}

// Flags say which command line's flags stand behind a BackendOptions, for
// what only flags have: CheckFlags.
type Flags struct {
	// Backends are the backends the command opens, bench's --backends run
	// side by side; none: the options' Name alone (--backend).
	Backends []string
	// UBatch says the command has --ubatch, whose default is the number
	// (DefaultUBatch): 0 is no value of the flag, as it is of UBatch.
	UBatch bool
}

// CheckFlags is the one check of the options a command line's flags fill,
// before any model loads (a context length against the model is CheckFor's):
// what Check refuses, and what only flags have. --device picks a Vulkan
// device, so one of the backends must be vulkan, or auto, which it then
// means; --ubatch has no 0. A wrong flag is an *OptionError.
func (o BackendOptions) CheckFlags(f Flags) error {
	if err := o.Check(); err != nil {
		return err
	}
	if f.UBatch && o.UBatch < 1 {
		return &OptionError{Option: "UBatch", Value: fmt.Sprint(o.UBatch), Problem: ": must be at least 1"}
	}
	if o.Device < 0 {
		return nil
	}
	backends := f.Backends
	if len(backends) == 0 {
		backends = []string{o.Name}
	}
	for _, b := range backends {
		if b == BackendVulkan || b == BackendAuto {
			return nil
		}
	}
	return &OptionError{Option: "Device", Value: fmt.Sprint(o.Device),
		Problem: fmt.Sprintf(" picks a Vulkan device, but the backend is %s: drop --device, or use --backend vulkan", strings.Join(backends, ","))}
}

// ParseBackends reads a comma-separated list of the backends to run side by
// side (bench's --backends): cpu, reference or vulkan each (auto is no one
// backend to measure). An unknown name is an *OptionError.
func ParseBackends(list string) ([]string, error) {
	var names []string
	for _, name := range strings.Split(list, ",") {
		switch name = strings.TrimSpace(name); name {
		case BackendCPU, BackendReference, BackendVulkan:
			names = append(names, name)
		default:
			return nil, &OptionError{Option: "Backends", Problem: fmt.Sprintf(": %q is not cpu, reference or vulkan", name)}
		}
	}
	return names, nil
}

// OptionError is an option that a check refuses (BackendOptions,
// SamplerOptions, PerplexityOptions, and the API's options), named by its
// Go field as the API's user writes it: Error says `KVType "q8" is not f16
// or f32`. A command line or a server that fills the options from its
// flags or fields says the same by its own name for the option (Named),
// so each option's rule is written once.
type OptionError struct {
	Option  string // the field: "KVType", "Temperature"
	Value   string // the value given, quoted when a string: "\"q8\""; "" when Problem names it
	Problem string // what is wrong, after the value: " is not f16 or f32", ": must be positive"
}

// Error names the option by its field: `KVType "q8" is not f16 or f32`.
func (e *OptionError) Error() string { return e.Named(e.Option) }

// Named is the error with the option called name instead of its field: a
// flag (`--kv-type "q8" is not f16 or f32`) or a request's JSON field.
func (e *OptionError) Named(name string) string {
	if e.Value == "" {
		return name + e.Problem
	}
	return name + " " + e.Value + e.Problem
}
