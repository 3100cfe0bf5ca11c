package engine

import (
	"cmp"
	"fmt"

	"github.com/modrun/modrun/engine/cpu"
	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// Profiler is a Runner that reports the GPU time of each kernel (the Vulkan
// backend, opened with BackendOptions.Profile).
type Profiler interface {
	Profile() []vulkan.ProfileEntry // most time first
}

// GPUMemoryStatser is a Runner that reports the GPU memory it holds.
type GPUMemoryStatser interface {
	MemoryStats() vulkan.MemoryStats
}

// StepCountser is a Runner that counts the commands of its recorded decode
// step (the Vulkan backend).
type StepCountser interface {
	StepCounts() vulkan.StepCounts
}

// Backend is a Runner on the chosen device. Close releases the device.
type Backend struct {
	Runner
	Name string // "cpu", "reference", or "vulkan: DEVICE NAME"
	// Tuned are the knobs the tuning file gave the runner (the
	// environment's variables override them: Knobs.Describe says which),
	// and TuningFile that file: empty where it gave none
	// (BackendOptions.Knobs).
	Tuned      vulkan.Knobs
	TuningFile string
	chunk      int // PromptChunk
	release    []func()
}

// referenceChunk bounds how many prompt tokens the reference backend runs
// in one Feed, so that cancelling stops a long prompt soon there.
const referenceChunk = 32

// PromptChunk is how many prompt tokens the generation loop gives one Feed
// (GenerateOptions.Chunk): the backend's batch (BackendOptions.UBatch) on
// Vulkan, whose batch runs as one graph in milliseconds, and on the fast
// CPU, which runs a batch as matrix products; referenceChunk on the
// reference. 0 (a Backend not opened by OpenBackend): the whole prompt.
func (b *Backend) PromptChunk() int { return b.chunk }

// DrawsOnDevice says whether b's runner draws a plain sampled token itself
// (DrawFeeder: Vulkan on a GPU profile), as a generation does for a
// sampler whose Plain is true.
func (b *Backend) DrawsOnDevice() bool {
	d, ok := b.Runner.(DrawFeeder)
	return ok && d.DrawsOnDevice()
}

// Close frees the runner and the device, in that order.
func (b *Backend) Close() {
	for i := len(b.release) - 1; i >= 0; i-- {
		b.release[i]()
	}
	b.release = nil
}

// OpenBackend makes a generate-mode runner of m with routing r on the
// backend o names (choose: BackendAuto falls back to the CPU with a
// one-line notice).
func OpenBackend(m *mod.Model, r mod.Routing, o BackendOptions) (b *Backend, notice string, err error) {
	if err := o.Check(); err != nil {
		return nil, "", fmt.Errorf("engine: %w", err)
	}
	ctx, err := o.contextLen(m)
	if err != nil {
		return nil, "", err
	}
	o.ContextLen = ctx
	if r == mod.RoutingTopK {
		return nil, "", fmt.Errorf("engine: generation needs causal routing (router or predictor), not top-k")
	}
	var run Runner
	var chunk int
	var tuned vulkan.Knobs
	var tuning string
	p, notice, err := choose(o, func(p *place) error {
		switch {
		case p.dev != nil:
			chunk = cmp.Or(o.UBatch, DefaultUBatch)
			knobs, path, err := o.knobsFor(p.dev, m)
			if err != nil {
				return err
			}
			v, err := vulkan.New(p.dev, m, r, vulkan.Options{Profile: o.Profile, Trace: o.Trace, ContextLen: ctx, KVType: o.KVType, UBatch: o.UBatch, Knobs: knobs})
			if err != nil {
				return err
			}
			if path != "" {
				tuned, tuning = knobs, path
			}
			run, p.release = gpuRunner{Runner: v, m: m}, append(p.release, v.Close)
		case p.name == BackendCPU:
			chunk = cmp.Or(o.UBatch, DefaultCPUUBatch)
			c, err := cpu.New(m, r, cpu.Options{ContextLen: ctx, UBatch: o.UBatch, KVType: o.KVType})
			if err != nil {
				return err
			}
			run = cpuRunner{c}
		default: // BackendReference
			chunk = referenceChunk
			c, err := NewCPU(m, r)
			if err != nil {
				return err
			}
			c.ctx, run = ctx, c
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return &Backend{Runner: run, Name: p.name, Tuned: tuned, TuningFile: tuning, chunk: chunk, release: p.release}, notice, nil
}

// place is where a backend runs: a CPU backend (dev nil), or a Vulkan
// device with the releases of the device and its instance.
type place struct {
	name    string     // BackendCPU, BackendReference, or "vulkan: DEVICE NAME"
	dev     *vk.Device // nil on the CPU
	release []func()   // in the order of opening
}

func (p *place) close() { (&Backend{release: p.release}).Close() }

// choose opens on the backend o names what open makes there (open adds
// its releases to the place). With BackendAuto it takes a Vulkan GPU when
// one is usable, and otherwise the CPU, returning a one-line notice that
// says why: no Vulkan, only a CPU emulation, or open's error on the GPU.
// A Vulkan device that is a CPU emulation (lavapipe) does not count as a
// GPU for auto: the native CPU backend is several times faster there;
// BackendVulkan uses it anyway. A device named by o.Device or
// $MODRUN_DEVICE is used whatever its type, and one that cannot be opened
// is an error, never a fallback.
func choose(o BackendOptions, open func(*place) error) (*place, string, error) {
	onCPU := func(name string) (*place, error) {
		p := &place{name: name}
		if err := open(p); err != nil {
			return nil, err
		}
		return p, nil
	}
	switch o.Name {
	case BackendCPU, BackendReference:
		p, err := onCPU(o.Name)
		return p, "", err
	case BackendVulkan:
		p, _, err := onVulkan(o.Device, false, open)
		return p, "", err
	case BackendAuto:
		named := o.namedDevice()
		p, why, err := onVulkan(o.Device, !named, open)
		if err == nil && p != nil {
			return p, "", nil
		}
		if named {
			return nil, "", err // the device asked for, not a fallback to the CPU
		}
		if err != nil {
			why = err.Error()
		}
		p, err = onCPU(BackendCPU)
		return p, "modrun: " + why + "; running on the CPU", err
	}
	return nil, "", fmt.Errorf("engine: --backend %q is not %s", o.Name, backendNames) // Check refuses it first
}

// onVulkan opens the chosen Vulkan device and what open makes on it. With
// gpuOnly it returns (nil, why, nil) instead of using a CPU device.
func onVulkan(device int, gpuOnly bool, open func(*place) error) (*place, string, error) {
	if err := vk.Load(); err != nil {
		return nil, "", fmt.Errorf("no Vulkan: %w", err)
	}
	inst, err := vk.NewInstance(vk.InstanceOptions{})
	if err != nil {
		return nil, "", err
	}
	p := &place{release: []func(){inst.Close}}
	fail := func(err error) (*place, string, error) { p.close(); return nil, "", err }
	devs, err := inst.Devices()
	if err != nil {
		return fail(err)
	}
	info, err := vk.ChooseDevice(devs, device)
	if err != nil {
		return fail(err)
	}
	if gpuOnly && info.Type == vk.CPU {
		p.close()
		return nil, fmt.Sprintf("the only Vulkan device, %s, is a CPU emulation (--backend vulkan uses it)", info.Name), nil
	}
	if p.dev, err = inst.NewDevice(info); err != nil {
		return fail(err)
	}
	p.name, p.release = "vulkan: "+info.Name, append(p.release, p.dev.Close)
	if err := open(p); err != nil {
		return fail(err)
	}
	return p, "", nil
}

// OnVulkanDevice opens the Vulkan device that BackendOptions{Name:
// BackendVulkan, Device: device} runs on (a CPU emulation too), calls f
// with its name ("vulkan: NAME") and the device, and closes it. It is
// exported for what measures the device itself and opens no model:
// bench's bandwidth probe.
func OnVulkanDevice(device int, f func(name string, dev *vk.Device) error) error {
	p, _, err := onVulkan(device, false, func(p *place) error { return f(p.name, p.dev) })
	if err != nil {
		return err
	}
	p.close()
	return nil
}

// CPUKernels names the kernels the CPU backend runs on this machine:
// "avx2+avx512-vnni", "avx2", or "go" (the portable ones).
func CPUKernels() string { return cpu.Kernels() }

// cpuRunner gives the fast CPU runner engine's routing types; its
// FeedArgmax makes it a GreedyFeeder.
type cpuRunner struct{ *cpu.Runner }

// RoutingStats reports the routed layers' counts since Reset.
func (c cpuRunner) RoutingStats() []LayerStat {
	selected, seen := c.Counts()
	var out []LayerStat
	for l, n := range seen {
		if c.Routed(l) {
			out = append(out, LayerStat{Layer: l, Selected: selected[l], Seen: n})
		}
	}
	return out
}

// ScorerBackend is a Scorer on the chosen device. Close releases it.
type ScorerBackend struct {
	Scorer
	Name string
	// Emulated says the Vulkan device is a CPU emulation (lavapipe): a
	// long text takes minutes there, where the CPU backend is faster.
	Emulated bool
	release  []func()
}

// Close frees the scorer and the device.
func (s *ScorerBackend) Close() { (&Backend{release: s.release}).Close() }

// OpenScorer makes a scorer of m with routing r, on the backend o names
// (choose, as OpenBackend). On Vulkan, top-k routing (and a dense model) is
// eval mode (vulkan.Evaluator); causal routing of a MoD model runs through
// the generate-mode batched prefill (vulkan.Runner.Score).
func OpenScorer(m *mod.Model, r mod.Routing, o BackendOptions) (*ScorerBackend, string, error) {
	if err := o.Check(); err != nil {
		return nil, "", fmt.Errorf("engine: %w", err)
	}
	var sc Scorer
	p, notice, err := choose(o, func(p *place) error {
		switch {
		case p.dev != nil && m.Config.IsMoD() && r != mod.RoutingTopK:
			// Scoring is for accuracy: an F32 cache, as eval mode's
			// attention and the CPU's, unless asked otherwise.
			kv := cmp.Or(o.KVType, shaders.KVF32.String())
			knobs, _, err := o.knobsFor(p.dev, m)
			if err != nil {
				return err
			}
			run, err := vulkan.New(p.dev, m, r, vulkan.Options{UBatch: o.UBatch, KVType: kv, ContextLen: o.ContextLen, Knobs: knobs})
			if err != nil {
				return err
			}
			sc, p.release = run, append(p.release, run.Close)
		case p.dev != nil:
			knobs, _, err := o.knobsFor(p.dev, m)
			if err != nil {
				return err
			}
			ev, err := vulkan.NewEvaluator(p.dev, m, vulkan.Options{ContextLen: o.ContextLen, Knobs: knobs})
			if err != nil {
				return err
			}
			sc, p.release = ev, append(p.release, ev.Close)
		case p.name == BackendCPU:
			run, err := cpu.New(m, r, cpu.Options{ContextLen: o.ContextLen, UBatch: o.UBatch, KVType: o.KVType})
			if err != nil {
				return err
			}
			sc = run
		default: // BackendReference
			ref, err := NewCPUScorer(m, r)
			if err != nil {
				return err
			}
			sc = ref
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	emulated := p.dev != nil && p.dev.Info().Type == vk.CPU
	return &ScorerBackend{Scorer: sc, Name: p.name, Emulated: emulated, release: p.release}, notice, nil
}

// gpuRunner adds the routing counts to the Vulkan runner: a routed layer's
// compact cache holds exactly the tokens it selected. The runner's
// FeedArgmax, Profile, MemoryStats and StepCounts make it a GreedyFeeder, a
// Profiler, a GPUMemoryStatser and a StepCountser.
type gpuRunner struct {
	*vulkan.Runner
	m *mod.Model
}

func (g gpuRunner) RoutingStats() []LayerStat {
	counts, err := g.CacheEntries()
	if err != nil {
		return nil
	}
	var out []LayerStat
	for _, l := range g.m.Config.RoutedLayers() {
		out = append(out, LayerStat{Layer: l, Selected: counts[l], Seen: g.Pos()})
	}
	return out
}
