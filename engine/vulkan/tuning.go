package vulkan

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// The tuning file (docs/tuning.md): what `modrun tune` measured to be the
// fastest knobs (knobs.go) for one model on one device, kept for later
// runs. An entry applies only where everything that decided it is the
// same: the device, its driver, modrun's kernels (shaders.BuildID) and
// the engine's choices among them (KnobsRevision), and the model's shape
// and weight types. A kernel or a knob's meaning changed by a later
// modrun, a driver update or another model leaves the entry unused, never
// applied to what it was not measured on.

// TuningVersion is the tuning file's format.
const TuningVersion = 1

// Tuning is the tuning file.
type Tuning struct {
	Version int           `json:"version"`
	Entries []TuningEntry `json:"entries"`
}

// TuningEntry is one model's knobs on one device.
type TuningEntry struct {
	TuningKey
	Knobs Knobs  `json:"knobs"` // empty: every default was fastest
	Date  string `json:"date"`  // when it was tuned (RFC 3339)
	// Trials are the comparisons that chose Knobs, in the order run.
	Trials []TuningTrial `json:"trials,omitempty"`
}

// TuningKey is what an entry was measured on.
type TuningKey struct {
	Device   string `json:"device"` // vk.DeviceInfo.Name
	VendorID uint32 `json:"vendor_id"`
	DeviceID uint32 `json:"device_id"`
	Driver   string `json:"driver"` // DriverName and DriverInfo (the version)
	Build    string `json:"build"`  // tuningBuild: the kernels, and how the engine chooses among them
	Model    string `json:"model"`  // TuningModelKey
}

// TuningTrial is one knob's comparison: the knobs chosen so far (Base)
// against them with Knob at Value, timed round by round in one run.
type TuningTrial struct {
	Knob  string `json:"knob"`
	Value string `json:"value"`
	Base  Knobs  `json:"base"`
	// Metric is what decided: "prefill" or "decode" tokens/s of one
	// sequence with a prompt of Prompt tokens, or "parallel": the
	// aggregate decode tokens/s of Parallel sequences at once, each with a
	// prompt of Prompt tokens (in the Decode fields; no prefill figures).
	Metric   string `json:"metric"`
	Prompt   int    `json:"prompt_tokens"`
	Parallel int    `json:"parallel,omitempty"`
	// The medians, tokens/s, of the base and the candidate: prefill and
	// decode.
	BasePrefill float64 `json:"base_prefill"`
	BaseDecode  float64 `json:"base_decode"`
	Prefill     float64 `json:"prefill"`
	Decode      float64 `json:"decode"`
	// What decided, round by round (each round ran the base, then the
	// candidate): Gain is the median over the rounds of the candidate's
	// metric over the base's in the same round, Other the same of the other
	// rate (1 for "parallel", which has none), Wins the rounds whose
	// candidate beat its base on the metric.
	Rounds int     `json:"rounds"`
	Wins   int     `json:"wins"`
	Gain   float64 `json:"gain"`
	Other  float64 `json:"other"`
	Chosen bool    `json:"chosen"`
	Why    string  `json:"why"`
}

// KeyOf is the key of model m on a device.
func KeyOf(info vk.DeviceInfo, m *mod.Model) TuningKey {
	k := tuningDeviceKey(info)
	k.Model = TuningModelKey(m)
	return k
}

// tuningDeviceKey is KeyOf without the model: the device, its driver and this
// build's kernels.
func tuningDeviceKey(info vk.DeviceInfo) TuningKey {
	return TuningKey{Device: info.Name, VendorID: info.VendorID, DeviceID: info.DeviceID,
		Driver: strings.TrimSpace(info.DriverName + " " + info.DriverInfo), Build: tuningBuild()}
}

// tuningBuild names what of this modrun a tuning was measured with: its
// kernels (shaders.BuildID) and KnobsRevision.
func tuningBuild() string { return fmt.Sprintf("%s.knobs%d", shaders.BuildID(), KnobsRevision) }

// TuningModelKey names what of a model decides its kernels' speed: its
// shape and how many of its tensors have each weight type. Two files of
// the same shape and types share their tuning.
func TuningModelKey(m *mod.Model) string {
	c := m.Config
	routed := 0
	for _, r := range c.Routed {
		if r {
			routed++
		}
	}
	key := fmt.Sprintf("%s embd %d ff %d layers %d heads %d kv %d x %d vocab %d routed %d", c.Arch, c.NEmbd, c.NFF, c.NLayer, c.NHead, c.NKVHead, c.HeadDim, c.NVocab, routed)
	if c.HasPredictor() {
		key += " predictor " + c.Predictor
	}
	if m.File == nil {
		return key
	}
	types := map[string]int{}
	for _, t := range m.File.Tensors {
		types[t.Type.String()]++
	}
	var names []string
	for name := range types {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		key += fmt.Sprintf(" %s:%d", name, types[name])
	}
	return key
}

// TuningPath is where the tuning file is: $MODRUN_TUNING, else
// tuning.json in the user's cache folder (os.UserCacheDir: $XDG_CACHE_HOME
// or ~/.cache on Linux, under modrun/). MODRUN_TUNING=off, or no cache
// folder, gives "": no tuning read or written.
func TuningPath() string {
	switch v := os.Getenv("MODRUN_TUNING"); v {
	case "off":
		return ""
	case "":
		dir, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		return filepath.Join(dir, "modrun", "tuning.json")
	default:
		return v
	}
}

// LoadTuning reads the tuning file at path; a missing file is an empty
// tuning. A file that is not one, or holds a knob or value the engine
// refuses, is an error naming it and what to do.
func LoadTuning(path string) (*Tuning, error) {
	t := &Tuning{Version: TuningVersion}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return t, nil
	}
	bad := func(err error) error {
		return fmt.Errorf("vulkan: tuning file %s: %s (run modrun tune again to remake it, delete it, or set MODRUN_TUNING=off)", path, strings.ReplaceAll(err.Error(), "vulkan: ", ""))
	}
	if err != nil {
		return nil, bad(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(t); err != nil {
		return nil, bad(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad(errors.New("more after the tuning's JSON object"))
	}
	if t.Version != TuningVersion {
		return nil, bad(fmt.Errorf("version %d, this modrun reads %d", t.Version, TuningVersion))
	}
	for i, e := range t.Entries {
		if err := checkKnobValues(e.Knobs); err != nil {
			return nil, bad(fmt.Errorf("entry %d: %w", i, err))
		}
	}
	return t, nil
}

// Lookup is the entry for key, if t has one.
func (t *Tuning) Lookup(key TuningKey) (TuningEntry, bool) {
	for _, e := range t.Entries {
		if e.TuningKey == key {
			return e, true
		}
	}
	return TuningEntry{}, false
}

// ForDevice are t's entries measured on the device info describes, with
// its driver: those of this build's kernels (the ones runs take), and
// how many others were measured with other kernels (never taken).
func (t *Tuning) ForDevice(info vk.DeviceInfo) (current []TuningEntry, stale int) {
	k := tuningDeviceKey(info)
	for _, e := range t.Entries {
		if e.Device != k.Device || e.VendorID != k.VendorID || e.DeviceID != k.DeviceID || e.Driver != k.Driver {
			continue
		}
		if e.Build == k.Build {
			current = append(current, e)
		} else {
			stale++
		}
	}
	return current, stale
}

// Put adds e, replacing an entry of the same key.
func (t *Tuning) Put(e TuningEntry) {
	for i := range t.Entries {
		if t.Entries[i].TuningKey == e.TuningKey {
			t.Entries[i] = e
			return
		}
	}
	t.Entries = append(t.Entries, e)
}

// Save writes t to path (its folder made if missing), whole or not at all:
// a temporary file renamed over it.
func (t *Tuning) Save(path string) error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("vulkan: tuning file %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tuning-*.json")
	if err != nil {
		return fmt.Errorf("vulkan: tuning file %s: %w", path, err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("vulkan: tuning file %s: %w", path, err)
	}
	return nil
}

// TunedKnobs are the knobs the tuning file (TuningPath) holds for model m
// on the device info describes, and the file's path; nil and "" where it
// holds none (or tuning is off).
func TunedKnobs(info vk.DeviceInfo, m *mod.Model) (Knobs, string, error) {
	path := TuningPath()
	if path == "" {
		return nil, "", nil
	}
	t, err := LoadTuning(path)
	if err != nil {
		return nil, "", err
	}
	e, ok := t.Lookup(KeyOf(info, m))
	if !ok {
		return nil, "", nil
	}
	return e.Knobs, path, nil
}
