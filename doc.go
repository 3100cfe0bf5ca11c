// Package modrun runs Mixture-of-Depths (MoD) Llama models from GGUF files on
// any Vulkan GPU, checked against a pure-Go CPU reference.
//
// The packages, from the leaves up (../shared/DESIGN.md §2): gguf (the file
// format), tokenizer, mod (the model and its CPU reference), vk and shaders
// (Vulkan compute), engine and engine/vulkan (runners, sampling, generation),
// and cmd/modrun (the command line). layout_test.go keeps imports pointing
// toward the leaves.
package modrun
