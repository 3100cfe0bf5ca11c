// Package mod declares the Mixture-of-Depths Llama model once: its GGUF names
// (names.go), its configuration from GGUF metadata, its weights, the routing
// rules of DESIGN.md §3, and the pure-Go CPU reference forward pass that every
// other backend is checked against.
package mod
