package engine

import (
	"fmt"

	"github.com/modrun/modrun/engine/cpu"
	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/mod"
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

// Backend is a Runner on the chosen device. Close releases the device.
type Backend struct {
	Runner
	Name    string // "cpu", "reference", or "vulkan: DEVICE NAME"
	release []func()
}

// Close frees the runner and the device, in that order.
func (b *Backend) Close() {
	for i := len(b.release) - 1; i >= 0; i-- {
		b.release[i]()
	}
	b.release = nil
}

// OpenBackend makes a generate-mode runner of m with routing r. With
// BackendAuto it takes a Vulkan GPU when one is usable and otherwise the
// CPU, returning a one-line notice that says why. A Vulkan device that is a
// CPU emulation (lavapipe) does not count as a GPU for auto: the native CPU
// backend is several times faster there; BackendVulkan uses it anyway.
// A device named by o.Device or $MODRUN_DEVICE is used whatever its type,
// and one that cannot be opened is an error, never a fallback.
func OpenBackend(m *mod.Model, r mod.Routing, o BackendOptions) (b *Backend, notice string, err error) {
	if err := o.Check(); err != nil {
		return nil, "", fmt.Errorf("engine: %w", err)
	}
	ctx, err := o.contextLen(m)
	if err != nil {
		return nil, "", err
	}
	o.ContextLen = ctx
	switch o.Name {
	case BackendCPU:
		return cpuBackend(m, r, o)
	case BackendReference:
		return referenceBackend(m, r, ctx)
	case BackendVulkan:
		b, _, err := vulkanBackend(m, r, o, false)
		return b, "", err
	case BackendAuto:
		named := o.namedDevice()
		b, why, err := vulkanBackend(m, r, o, !named)
		if err == nil && b != nil {
			return b, "", nil
		}
		if named {
			return nil, "", err // the device asked for, not a fallback to the CPU
		}
		if err != nil {
			why = err.Error()
		}
		b, _, err = cpuBackend(m, r, o)
		return b, "modrun: " + why + "; running on the CPU", err
	}
	return nil, "", fmt.Errorf("--backend %q is not %s", o.Name, backendNames)
}

// cpuBackend opens the fast CPU runner, which generates with causal
// routing only (as the reference's NewCPU).
func cpuBackend(m *mod.Model, r mod.Routing, o BackendOptions) (*Backend, string, error) {
	if r == mod.RoutingTopK {
		return nil, "", fmt.Errorf("engine: generation needs causal routing (router or predictor), not top-k")
	}
	run, err := cpu.New(m, r, cpu.Options{ContextLen: o.ContextLen, UBatch: o.UBatch})
	if err != nil {
		return nil, "", err
	}
	return &Backend{Runner: cpuRunner{run}, Name: BackendCPU}, "", nil
}

func referenceBackend(m *mod.Model, r mod.Routing, ctx int) (*Backend, string, error) {
	c, err := NewCPU(m, r)
	if err != nil {
		return nil, "", err
	}
	c.ctx = ctx
	return &Backend{Runner: c, Name: BackendReference}, "", nil
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

// vulkanDevice opens the chosen Vulkan device. With gpuOnly it returns
// (nil, why, nil) instead of using a CPU device. The returned Backend holds
// only the release of the instance and device; callers add the runner.
func vulkanDevice(device int, gpuOnly bool) (*Backend, *vk.Device, string, error) {
	if err := vk.Load(); err != nil {
		return nil, nil, "", fmt.Errorf("no Vulkan: %w", err)
	}
	inst, err := vk.NewInstance(vk.InstanceOptions{})
	if err != nil {
		return nil, nil, "", err
	}
	b := &Backend{release: []func(){inst.Close}}
	fail := func(err error) (*Backend, *vk.Device, string, error) { b.Close(); return nil, nil, "", err }
	devs, err := inst.Devices()
	if err != nil {
		return fail(err)
	}
	info, err := vk.ChooseDevice(devs, device)
	if err != nil {
		return fail(err)
	}
	if gpuOnly && info.Type == vk.CPU {
		b.Close()
		return nil, nil, fmt.Sprintf("the only Vulkan device, %s, is a CPU emulation (--backend vulkan uses it)", info.Name), nil
	}
	dev, err := inst.NewDevice(info)
	if err != nil {
		return fail(err)
	}
	b.release = append(b.release, dev.Close)
	b.Name = "vulkan: " + info.Name
	return b, dev, "", nil
}

// vulkanBackend opens the chosen device and a generate-mode runner on it.
func vulkanBackend(m *mod.Model, r mod.Routing, o BackendOptions, gpuOnly bool) (*Backend, string, error) {
	b, dev, why, err := vulkanDevice(o.Device, gpuOnly)
	if b == nil {
		return nil, why, err
	}
	run, err := vulkan.New(dev, m, r, vulkan.Options{Profile: o.Profile, Trace: o.Trace, ContextLen: o.ContextLen, KVType: o.KVType, UBatch: o.UBatch})
	if err != nil {
		b.Close()
		return nil, "", err
	}
	b.release = append(b.release, run.Close)
	b.Runner = gpuRunner{Runner: run, m: m}
	return b, "", nil
}

// ScorerBackend is a Scorer on the chosen device. Close releases it.
type ScorerBackend struct {
	Scorer
	Name    string
	release []func()
}

// Close frees the scorer and the device.
func (s *ScorerBackend) Close() { (&Backend{release: s.release}).Close() }

// OpenScorer makes a scorer of m with routing r, choosing the backend as
// OpenBackend does. On Vulkan, top-k routing (and a dense model) is eval
// mode (vulkan.Evaluator); causal routing of a MoD model runs through the
// generate-mode batched prefill (vulkan.Runner.Score).
func OpenScorer(m *mod.Model, r mod.Routing, o BackendOptions) (*ScorerBackend, string, error) {
	if err := o.Check(); err != nil {
		return nil, "", fmt.Errorf("engine: %w", err)
	}
	onCPU := func(notice string) (*ScorerBackend, string, error) {
		run, err := cpu.New(m, r, cpu.Options{ContextLen: o.ContextLen, UBatch: o.UBatch})
		if err != nil {
			return nil, "", err
		}
		return &ScorerBackend{Scorer: run, Name: BackendCPU}, notice, nil
	}
	switch o.Name {
	case BackendCPU:
		return onCPU("")
	case BackendReference:
		sc, err := NewCPUScorer(m, r)
		if err != nil {
			return nil, "", err
		}
		return &ScorerBackend{Scorer: sc, Name: BackendReference}, "", nil
	case BackendVulkan:
		return vulkanScorer(m, r, o, false)
	case BackendAuto:
		named := o.namedDevice()
		sb, why, err := vulkanScorer(m, r, o, !named)
		if err == nil && sb != nil {
			return sb, "", nil
		}
		if named {
			return nil, "", err
		}
		if err != nil {
			why = err.Error()
		}
		return onCPU("modrun: " + why + "; running on the CPU")
	}
	return nil, "", fmt.Errorf("--backend %q is not %s", o.Name, backendNames)
}

func vulkanScorer(m *mod.Model, r mod.Routing, o BackendOptions, gpuOnly bool) (*ScorerBackend, string, error) {
	b, dev, why, err := vulkanDevice(o.Device, gpuOnly)
	if b == nil {
		return nil, why, err
	}
	if m.Config.IsMoD() && r != mod.RoutingTopK {
		// Scoring is for accuracy: an F32 cache, as eval mode's attention
		// and the CPU's, unless asked otherwise.
		kv := o.KVType
		if kv == "" {
			kv = "f32"
		}
		run, err := vulkan.New(dev, m, r, vulkan.Options{UBatch: o.UBatch, KVType: kv, ContextLen: o.ContextLen})
		if err != nil {
			b.Close()
			return nil, "", err
		}
		return &ScorerBackend{Scorer: run, Name: b.Name, release: append(b.release, run.Close)}, "", nil
	}
	ev, err := vulkan.NewEvaluator(dev, m, vulkan.Options{ContextLen: o.ContextLen})
	if err != nil {
		b.Close()
		return nil, "", err
	}
	return &ScorerBackend{Scorer: ev, Name: b.Name, release: append(b.release, ev.Close)}, "", nil
}

// gpuRunner adds the routing counts to the Vulkan runner: a routed layer's
// compact cache holds exactly the tokens it selected. The runner's
// FeedArgmax, Profile and MemoryStats make it a GreedyFeeder, a Profiler and
// a GPUMemoryStatser.
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
