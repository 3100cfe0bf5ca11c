// Package engine runs models: the Runner interface that each backend
// implements (the CPU reference, the CPU backend, Vulkan) and the backends
// that open them, each backend's step runner for engine/sched (Stepper),
// the sampler, the Generate loop, and perplexity scoring. It is the
// library only: what measures it (modrun bench's timing and its validation
// against the CPU reference, the bandwidth probe, perplexity --compare) is
// package bench.
package engine
