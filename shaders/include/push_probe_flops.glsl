// push_probe_flops.glsl: the push-constant block of probe_fma.comp and
// probe_coop.comp, mirrored in Go by shaders/probe.go (ProbeFlopsPush;
// 4-byte scalars only; TestVariantInterfaces checks both against the
// SPIR-V).

layout(push_constant) uniform ProbeFlopsPush {
	uint iterations; // trips of the main loop
	float a;         // every step is x = x*a + b: 1 and 1 make the result an exact count
	float b;
} p;
