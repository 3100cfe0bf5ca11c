// push_probe.glsl: the push-constant block of probe.comp, mirrored in Go by
// shaders/probe.go (4-byte scalars only; TestVariantInterfaces checks both
// against the SPIR-V).

layout(push_constant) uniform ProbePush {
	uint n;     // uvec4 elements in the buffer
	uint magic; // probe_read writes sink[0] only when its XOR equals this: never, in practice
} p;
