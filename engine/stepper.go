package engine

import (
	"fmt"

	"github.com/modrun/modrun/engine/cpu"
	"github.com/modrun/modrun/engine/sched"
)

// Stepper is a backend's step runner (sched.StepRunner) with what the
// generation loop (Loop) needs of it.
type Stepper interface {
	sched.StepRunner
	// PageBytes is the memory of one page of blockTokens entries.
	PageBytes(blockTokens int) int
	// Reserve makes room for the scheduler's pool of pages before its
	// first step (the Vulkan pool on the device; nothing on the CPU,
	// whose pages are made on first use).
	Reserve(pages, blockTokens int) error
	// MaxRows is the most rows a step takes (the scheduler's BatchTokens
	// must not pass it); 0: any.
	MaxRows() int
}

// StepperOf is a step runner over backend b's weights, shared with its
// runner, for steps in which up to seqs rows want logits (more grow its
// buffers): the CPU's cpu.Stepper, Vulkan's vulkan.Stepper (which shares
// the runner's device and scratch too: the two must not run at once).
// The reference backend has none.
func StepperOf(b *Backend, seqs int) (Stepper, error) {
	switch r := b.Runner.(type) {
	case cpuRunner:
		st, err := r.Runner.Stepper()
		if err != nil {
			return nil, err
		}
		return cpuStepper{st}, nil
	case gpuRunner:
		st, err := r.Runner.Stepper(seqs)
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	return nil, fmt.Errorf("engine: backend %s has no batched step", b.Name)
}

// cpuStepper is the CPU's step runner as a Stepper: its pages are made on
// first use, and a step takes any number of rows.
type cpuStepper struct{ *cpu.Stepper }

func (cpuStepper) Reserve(pages, blockTokens int) error { return nil }
func (cpuStepper) MaxRows() int                         { return 0 }
