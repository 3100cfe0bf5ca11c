// Package engine runs models: the Runner interface that each backend
// implements (the CPU reference, the CPU backend, Vulkan) and the backends
// that open them, each backend's step runner for engine/sched (Stepper),
// the sampler, the Generate loop, and perplexity scoring.
package engine
