package vulkan

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// Knobs are the engine's measuring knobs by the names of their environment
// variables (MODRUN_HANDOFF: "1"): the kernel choices a GPU has to time
// before they can be a default (docs/tuning.md). Options.Knobs gives a
// runner values, which `modrun tune` measured on the device and the
// tuning file keeps (tuning.go); a variable set in the environment
// overrides the value here, so that a knob a user sets always wins. A nil
// or empty Knobs leaves every knob to the environment and its default.
type Knobs map[string]string

// KnobsRevision counts the changes of what a knob means, or of how the
// engine chooses among the same kernels (Go code, which shaders.BuildID
// does not see), that make an earlier measurement wrong to apply: a
// tuning entry carries it in its build (TuningKey.Build), so that one
// measured before such a change is not taken after it. Raise it with such
// a change. 2: MODRUN_PROMPT_STEPS=1 runs a short prompt as one matvec
// pass (before: the matmul's tiles), and greedy steps chain (MODRUN_CHAIN).
const KnobsRevision = 2

// KnobNames are the knobs a Knobs may hold, each the name of the variable
// that sets it (README.md says what each does and takes).
var KnobNames = []string{
	"MODRUN_TENSOR_CORES",   // tensorCoresEnv
	"MODRUN_COOPMAT",        // coopMatEnv
	"MODRUN_MATMUL_PIPE",    // matmulPipeEnv
	"MODRUN_MATMUL_DIRECT",  // matmulDirectEnv
	"MODRUN_ATTENTION_COOP", // attentionCoopEnv
	"MODRUN_MATVEC_ROWS",    // matvecRowsEnv
	"MODRUN_ATTEND_KEYS",    // attendKeysEnv
	"MODRUN_ATTEND_OWN",     // attendOwnEnv
	"MODRUN_MATVEC_DOT",     // matvecDotEnv
	"MODRUN_HANDOFF",        // handoffEnv
	"MODRUN_VEC_ROWS",       // vecRowsEnv
	"MODRUN_PROMPT_STEPS",   // promptStepsEnv
	"MODRUN_CHAIN",          // chainEnv
}

// get is knob name's value: the environment's where it is set (not
// empty), else k's, else "" (the default).
func (k Knobs) get(name string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return k[name]
}

// Check says whether k names only knobs in KnobNames.
func (k Knobs) Check() error {
	for _, name := range k.Names() {
		if !slices.Contains(KnobNames, name) {
			return fmt.Errorf("vulkan: no knob %q (the knobs are %s)", name, strings.Join(KnobNames, ", "))
		}
	}
	return nil
}

// Names are k's knobs, sorted.
func (k Knobs) Names() []string {
	names := make([]string, 0, len(k))
	for name := range k {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// String is k as NAME=VALUE pairs in name order, "defaults" when empty.
func (k Knobs) String() string { return k.pairs(false) }

// Describe is k as String gives it, each knob that a variable in the
// environment overrides marked with the value that wins.
func (k Knobs) Describe() string { return k.pairs(true) }

func (k Knobs) pairs(env bool) string {
	if len(k) == 0 {
		return "defaults"
	}
	var s []string
	for _, name := range k.Names() {
		d := name + "=" + k[name]
		if v := os.Getenv(name); env && v != "" {
			d += fmt.Sprintf(" (the environment's %s wins)", v)
		}
		s = append(s, d)
	}
	return strings.Join(s, " ")
}

// With is a copy of k with name set to value ("" removes it: the default).
func (k Knobs) With(name, value string) Knobs {
	c := Knobs{}
	for n, v := range k {
		c[n] = v
	}
	if value == "" {
		delete(c, name)
	} else {
		c[name] = value
	}
	return c
}

// knobParse checks a value, not empty, of each knob as its knob reads it
// (a count of rows against the most any device takes: a runner checks its
// own device's when it opens).
var knobParse = map[string]func(v string) error{
	"MODRUN_TENSOR_CORES":   func(v string) error { _, _, err := parseTensorCores(v); return err },
	"MODRUN_COOPMAT":        func(v string) error { _, err := parseCoopMat(v); return err },
	"MODRUN_MATMUL_PIPE":    func(v string) error { _, err := parseMatmulPipe(v); return err },
	"MODRUN_MATMUL_DIRECT":  func(v string) error { _, _, err := parseMatmulDirect(v); return err },
	"MODRUN_ATTENTION_COOP": func(v string) error { _, err := parseAttentionCoop(v); return err },
	"MODRUN_MATVEC_ROWS":    func(v string) error { _, err := parseMatvecRows(v); return err },
	"MODRUN_ATTEND_KEYS":    func(v string) error { _, err := parseAttendKeys(v); return err },
	"MODRUN_ATTEND_OWN":     func(v string) error { _, err := parseAttendOwn(v); return err },
	"MODRUN_MATVEC_DOT":     func(v string) error { _, err := parseMatvecDot(v); return err },
	"MODRUN_HANDOFF":        func(v string) error { return setHandoff(&shaders.Profile{}, v) },
	"MODRUN_VEC_ROWS":       func(v string) error { _, err := parseVecRows(v, shaders.VecRowsMost); return err },
	"MODRUN_PROMPT_STEPS":   func(v string) error { _, err := parsePromptSteps(v); return err },
	"MODRUN_CHAIN":          func(v string) error { _, err := parseChain(v); return err },
}

// checkKnobs refuses a knob k does not know and any value, from k or the
// environment, that its knob does not take, by name (MODRUN_VEC_ROWS and
// MODRUN_HANDOFF against the device when a runner opens).
func checkKnobs(k Knobs) error {
	if err := k.Check(); err != nil {
		return err
	}
	in := Knobs{} // what the runner will read: the environment over k
	for _, name := range KnobNames {
		if v := k.get(name); v != "" {
			in[name] = v
		}
	}
	return checkKnobValues(in)
}

// checkKnobValues refuses a value of k that its knob does not take, as
// written (the environment aside: a tuning file's values).
func checkKnobValues(k Knobs) error {
	if err := k.Check(); err != nil {
		return err
	}
	for _, name := range k.Names() {
		if err := knobParse[name](k[name]); err != nil {
			return err
		}
	}
	return nil
}

// KnobsDiffer says whether a runner on the device info describes runs
// differently under knobs a and b: their profiles differ (ProfileWith, the
// device's facts aside: a knob the device cannot act on changes only
// those), or they set a runner's own knob (MODRUN_VEC_ROWS,
// MODRUN_PROMPT_STEPS, MODRUN_CHAIN) differently.
func KnobsDiffer(info vk.DeviceInfo, a, b Knobs) (bool, error) {
	pa, err := ProfileWith(info, a)
	if err != nil {
		return false, err
	}
	pb, err := ProfileWith(info, b)
	if err != nil {
		return false, err
	}
	for _, own := range []string{"MODRUN_VEC_ROWS", "MODRUN_PROMPT_STEPS", "MODRUN_CHAIN"} {
		if a.get(own) != b.get(own) {
			return true, nil
		}
	}
	pa.Device, pb.Device = shaders.Device{}, shaders.Device{}
	return !reflect.DeepEqual(pa, pb), nil
}
