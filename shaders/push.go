package shaders

// Push-constant structs, one per op family, mirroring include/push.glsl
// member for member: 4-byte fields only (pack with vk.PackPush). A test
// checks each against the block in every variant's SPIR-V.

// MatvecPush is matvec's push-constant block.
type MatvecPush struct {
	Rows uint32  // rows of W = elements of each y
	Cols uint32  // columns of W = elements of each x (Q8_0: a multiple of 32)
	N    uint32  // vectors: x is [N][Cols], y is [N][Rows]
	Eps  float32 // NORM variants (MatvecNorm...): added to mean(x²) (layer_norm_rms_epsilon)
}

// AddPush is add's push-constant block.
type AddPush struct {
	N uint32 // elements
}

// StageChainPush is stage_chain_dispatch's push-constant block: one stage
// of the chain a dispatch.
type StageChainPush struct {
	N      uint32 // elements (256 a workgroup)
	Stage  uint32 // this dispatch's stage
	Stages uint32 // the chain's stages
}
