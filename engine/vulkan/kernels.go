package vulkan

import (
	"fmt"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// kernel is a compiled variant with the specialization constants it was
// made with (its dispatch size depends on them).
type kernel struct {
	k    *vk.Kernel
	v    shaders.Variant
	spec []uint32
}

// kernels makes each (variant, specialization) once and closes them all.
type kernels struct {
	dev  *vk.Device
	prof shaders.Profile // picks each kernel's variant and specialization
	made map[string]*kernel
	// split is the runner's split-K matmul state (newSplitK), which
	// matRows gives every matrix bound for matmul; nil: never split.
	split *splitK
	// direct is the runner's direct matmul (newDirectMM), which matRows
	// gives every matrix bound for matmul; nil: none.
	direct *directMM
}

// newKernels makes the kernels of dev with profile prof, or with the
// device's own under knobs k (deviceFacts) when prof is nil.
func newKernels(dev *vk.Device, prof *shaders.Profile, k Knobs) *kernels {
	p := shaders.NewProfile(deviceFacts(dev.Info(), k))
	if prof != nil {
		p = *prof
	}
	return &kernels{dev: dev, prof: p, made: map[string]*kernel{}}
}

// DeviceProfile is the kernel profile of a device (DESIGN.md §6), from
// its facts (deviceFacts: the subgroup size its subgroup kernels may count
// on, features, limits, whether it is a CPU emulation with lavapipe's loop
// cap).
func DeviceProfile(info vk.DeviceInfo) shaders.Profile {
	return shaders.NewProfile(deviceFacts(info, nil))
}

// ProfileWith is the profile a runner opened on a device with knobs k
// (Options.Knobs, the environment over them) runs: DeviceProfile's under
// the knobs, the decode step's hand-off included. Knobs that change
// nothing on a device leave it equal to the default's (`modrun tune`
// skips those).
func ProfileWith(info vk.DeviceInfo, k Knobs) (shaders.Profile, error) {
	if err := checkKnobs(k); err != nil {
		return shaders.Profile{}, err
	}
	p := shaders.NewProfile(deviceFacts(info, k))
	err := handoffEnv(&p, k)
	return p, err
}

// get returns variant name with spec (nil: the variant's default).
func (ks *kernels) get(name string, spec []uint32) (*kernel, error) {
	v, err := shaders.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("vulkan: %w", err)
	}
	spec = ks.prof.Fit(v, spec) // nil: v.Spec
	key := fmt.Sprint(name, spec)
	if k, ok := ks.made[key]; ok {
		return k, nil
	}
	if err := ks.prof.Allows(v, spec); err != nil {
		return nil, fmt.Errorf("vulkan: device %s: %w", ks.dev.Info().Name, err)
	}
	vkk, err := ks.dev.NewKernel(v.SPIRV(), vk.KernelSpec{Name: name, Bindings: len(v.Bindings),
		PushConstantBytes: v.PushBytes(), Specialization: spec, RequiredSubgroupSize: ks.prof.RequiredSubgroupSize(v)})
	if err != nil {
		return nil, fmt.Errorf("vulkan: kernel %s: %w", name, err)
	}
	k := &kernel{k: vkk, v: v, spec: spec}
	ks.made[key] = k
	return k, nil
}

// matvec is the decode matrix-vector kernel for one vector of cols with
// weights of type typ (shaders.MatvecTypes) and fusion fuse
// (shaders.MatvecFusions), as the profile picks it.
func (ks *kernels) matvec(typ, fuse string, cols int) (*kernel, error) {
	name, spec := ks.prof.Matvec(typ, fuse, 1, uint32(cols))
	return ks.get(name, spec)
}

// row is a row kernel (rmsnorm, argmax) for rows of cols elements. On a
// device with a loop cap the profile keeps each invocation's loops under it
// (lavapipe's shaders.LavapipeLoopIterations): a vocabulary-wide argmax
// needs it.
func (ks *kernels) row(name string, cols int) (*kernel, error) {
	return ks.get(name, ks.prof.Row(name, uint32(cols)))
}

func (ks *kernels) Close() {
	for _, k := range ks.made {
		k.k.Close()
	}
	ks.made = nil
}

// op is one dispatch of the step, kept as data so a routed block's
// dispatches can be recorded indirectly from a table of their sizes.
type op struct {
	k      *kernel
	push   []byte
	groups [3]uint32
	binds  []vk.Bind
}

// newOp is a dispatch of k. Each bind's access is the one its binding has
// in the variant's table (shaders.Variant.Bindings), which the barriers
// are derived from: a bind that says otherwise, or a count that differs,
// is a bug in the caller, and panics here, at recording, where every test
// that records finds it.
func newOp(k *kernel, push any, groups [3]uint32, binds ...vk.Bind) op {
	if err := checkBinds(k.v, binds); err != nil {
		panic(err)
	}
	return op{k: k, push: vk.MustPackPush(push), groups: groups, binds: binds}
}

// checkBinds says how binds disagree with variant v's bindings, if they do.
func checkBinds(v shaders.Variant, binds []vk.Bind) error {
	if len(binds) != len(v.Bindings) {
		return fmt.Errorf("vulkan: %s: %d binds for its %d bindings", v.Name, len(binds), len(v.Bindings))
	}
	for i, b := range binds {
		if want := vk.Access(v.Bindings[i].Access); b.Access != want {
			return fmt.Errorf("vulkan: %s: binding %d (%s) bound %v, the variant's is %v", v.Name, i, v.Bindings[i].Name, b.Access, want)
		}
	}
	return nil
}

func (o op) record(rec *vk.Recorder) { rec.Dispatch(o.k.k, o.push, o.groups, o.binds...) }

func rd(b *vk.Buffer, off, size uint64) vk.Bind {
	return vk.Bind{Buf: b, Offset: off, Size: size, Access: vk.Read}
}

func wr(b *vk.Buffer, off, size uint64) vk.Bind {
	return vk.Bind{Buf: b, Offset: off, Size: size, Access: vk.Write}
}

func rw(b *vk.Buffer, off, size uint64) vk.Bind {
	return vk.Bind{Buf: b, Offset: off, Size: size, Access: vk.ReadWrite}
}
