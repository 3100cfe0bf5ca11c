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
	cpu  bool // a CPU device (lavapipe): the CPU specs
	made map[string]*kernel
	// routeAsGPU plans the routing kernels as for a GPU (subgroups, wide
	// workgroups) on a CPU device: tests run the GPU configuration on lavapipe.
	routeAsGPU bool
}

func newKernels(dev *vk.Device) *kernels {
	return &kernels{dev: dev, cpu: dev.Info().Type == vk.CPU, made: map[string]*kernel{}}
}

// get returns variant name with spec (nil: the variant's default).
func (ks *kernels) get(name string, spec []uint32) (*kernel, error) {
	v, err := shaders.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("vulkan: %w", err)
	}
	if spec == nil {
		spec = v.Spec
	}
	key := fmt.Sprint(name, spec)
	if k, ok := ks.made[key]; ok {
		return k, nil
	}
	vkk, err := ks.dev.NewKernel(v.SPIRV(), vk.KernelSpec{Name: name, Bindings: len(v.Bindings),
		PushConstantBytes: v.PushBytes(), Specialization: spec})
	if err != nil {
		return nil, fmt.Errorf("vulkan: kernel %s: %w", name, err)
	}
	k := &kernel{k: vkk, v: v, spec: spec}
	ks.made[key] = k
	return k, nil
}

// matvec is the decode matrix-vector kernel for weights of type typ ("f32",
// "f16", "q8_0"): an invocation per row on a CPU device, where a workgroup
// barrier costs more than the arithmetic (shaders.MatvecSpecCPU).
func (ks *kernels) matvec(typ string) (*kernel, error) {
	spec := shaders.MatvecSpecGPU
	if ks.cpu {
		spec = shaders.MatvecSpecCPU
	}
	return ks.get("matvec_"+typ, spec)
}

// row is a row kernel (rmsnorm, argmax) for rows of cols elements. On a CPU
// device RowSpecCPUFor keeps each invocation's loops under lavapipe's limit
// (shaders.LavapipeLoopIterations): a vocabulary-wide argmax needs it.
func (ks *kernels) row(name string, cols int) (*kernel, error) {
	spec := shaders.RowSpecGPU
	if ks.cpu {
		spec = shaders.RowSpecCPUFor(name, uint32(cols))
	}
	return ks.get(name, spec)
}

// scoreDevice is what shaders.PlanScore needs to know of the device.
func (ks *kernels) scoreDevice() shaders.ScoreDevice {
	info := ks.dev.Info()
	return shaders.ScoreDevice{CPU: ks.cpu && !ks.routeAsGPU, SubgroupSize: info.Limits.SubgroupSize,
		SubgroupArithmetic: info.Features.SubgroupArithmetic}
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

func newOp(k *kernel, push any, groups [3]uint32, binds ...vk.Bind) op {
	return op{k: k, push: vk.MustPackPush(push), groups: groups, binds: binds}
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
