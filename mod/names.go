package mod

import "fmt"

// Every GGUF key and tensor name the model uses, in one place (DESIGN.md §4).
// The llama keys are llama.cpp's; the MoD keys live under "llama-mod.mod.".

// Architectures.
const (
	ArchLlama = "llama"     // a dense model; a plain llama GGUF that llama.cpp loads
	ArchMoD   = "llama-mod" // a Mixture-of-Depths model: llama plus router tensors
)

// General and tokenizer keys (no architecture prefix).
const (
	KeyArchitecture = "general.architecture"
	KeyName         = "general.name"
	KeyFileType     = "general.file_type"
)

// Hyperparameter keys, without the "ARCH." prefix: use ArchKey to build one.
const (
	KeyContextLength  = "context_length"
	KeyEmbeddingLen   = "embedding_length"
	KeyBlockCount     = "block_count"
	KeyFeedForwardLen = "feed_forward_length"
	KeyHeadCount      = "attention.head_count"
	KeyHeadCountKV    = "attention.head_count_kv"
	KeyRMSEpsilon     = "attention.layer_norm_rms_epsilon"
	KeyRopeFreqBase   = "rope.freq_base"
	KeyRopeDimCount   = "rope.dimension_count"
	// RoPE scaling (llama.cpp's keys): type "none" or "linear" (the default
	// when absent, as in llama.cpp); factor divides every frequency.
	// rope.scale_linear is the factor's older name. YaRN and LongRoPE
	// ("yarn", "longrope") and an attention factor other than 1 are refused.
	KeyRopeScalingType       = "rope.scaling.type"
	KeyRopeScalingFactor     = "rope.scaling.factor"
	KeyRopeScaleLinear       = "rope.scale_linear"
	KeyRopeScalingAttnFactor = "rope.scaling.attn_factor"
	KeyVocabSize             = "vocab_size"

	// MoD keys (arch "llama-mod" only).
	KeyRoutedLayers    = "mod.routed_layers"    // array of u32 (or i32, as gguf-py writes): block indices with a router
	KeyCapacity        = "mod.capacity"         // f32 in (0, 1]: fraction of tokens routed in top-k mode
	KeyGate            = "mod.gate"             // string: "sigmoid" | "identity"
	KeyPredictorHidden = "mod.predictor_hidden" // u32: hidden width of the causal predictor, 0 = none

	// MoD semantics keys: what a routed block computes, for checkpoints of
	// the public MoD implementations. A file without them means DESIGN.md §3.
	KeyGateTarget       = "mod.gate_target"       // string: GateTarget*; default "block"
	KeyPositions        = "mod.positions"         // string: Positions*; default "original"
	KeyCapacityTokens   = "mod.capacity_tokens"   // u32 > 0: top-k takes min(n, this); mod.capacity is then unused
	KeyCapacityRounding = "mod.capacity_rounding" // string: Rounding*; default "ceil"
	KeyRouterBias       = "mod.router_bias"       // bool: every router has (true) or lacks (false) a bias; absent = either
	KeyPredictor        = "mod.predictor"         // string: Predictor*; default "mlp" when predictor_hidden > 0, else "none"
	KeyCausalRouting    = "mod.causal_routing"    // string: "router" | "predictor", the causal rule the model was trained for; default "router"
)

// Where g(r) applies in a routed block (mod.gate_target). With h = x +
// Attn(norm1(x)) and o = h + MLP(norm2(h)), a selected token becomes:
const (
	GateTargetBlock  = "block"  // x + g·(o − x): the whole block's update (DESIGN.md §3, the paper)
	GateTargetMLP    = "mlp"    // x + (h + g·MLP(norm2(h))): o with its MLP scaled, added onto x (MoD Llama 2's scatter_add)
	GateTargetOutput = "output" // g·o: the output including its residual (the Mixture-AI wrapper)
)

// The RoPE position of a token in a routed block (mod.positions).
const (
	PositionsOriginal = "original" // its position in the sequence (DESIGN.md §3)
	PositionsCompact  = "compact"  // its index among the tokens that entered this block so far
)

// How top-k turns the capacity fraction c into k for n tokens (mod.capacity_rounding).
const (
	RoundingCeil  = "ceil"  // max(1, ceil(c·n)) (DESIGN.md §3)
	RoundingFloor = "floor" // floor(c·n), which may be 0: Python's int(n * capacity)
)

// The causal predictor's form (mod.predictor).
const (
	PredictorNone   = "none"
	PredictorMLP    = "mlp"    // p = w2·SiLU(W1·x): mod_pred_up, mod_pred_down
	PredictorLinear = "linear" // p = w·x + b: mod_pred.weight, mod_pred.bias
)

// Gate functions g(r) applied to a routed block's output (DESIGN.md §3).
const (
	GateSigmoid  = "sigmoid"
	GateIdentity = "identity"
)

// ArchKey is the full metadata key of a hyperparameter: "llama.block_count".
func ArchKey(arch, key string) string { return arch + "." + key }

// Tensor names outside the blocks.
const (
	TensorTokenEmbd  = "token_embd.weight"  // [nEmbd, nVocab]
	TensorOutputNorm = "output_norm.weight" // [nEmbd]
	TensorOutput     = "output.weight"      // [nEmbd, nVocab]; absent = tied to token_embd
	TensorRopeFreqs  = "rope_freqs.weight"  // [headDim/2] F32 RoPE frequency factors (Llama 3.1); optional
)

// Tensor names inside block N, without the "blk.N." prefix: use BlockTensor.
const (
	TensorAttnNorm   = "attn_norm.weight"   // [nEmbd]
	TensorAttnQ      = "attn_q.weight"      // [nEmbd, nHead*headDim]
	TensorAttnK      = "attn_k.weight"      // [nEmbd, nKVHead*headDim]
	TensorAttnV      = "attn_v.weight"      // [nEmbd, nKVHead*headDim]
	TensorAttnOutput = "attn_output.weight" // [nHead*headDim, nEmbd]
	TensorFFNNorm    = "ffn_norm.weight"    // [nEmbd]
	TensorFFNGate    = "ffn_gate.weight"    // [nEmbd, nFF]
	TensorFFNUp      = "ffn_up.weight"      // [nEmbd, nFF]
	TensorFFNDown    = "ffn_down.weight"    // [nFF, nEmbd]

	// MoD tensors (routed blocks only; always F32).
	TensorRouterWeight = "mod_router.weight"    // [nEmbd]
	TensorRouterBias   = "mod_router.bias"      // [1], optional
	TensorPredUp       = "mod_pred_up.weight"   // [nEmbd, predictorHidden]
	TensorPredDown     = "mod_pred_down.weight" // [predictorHidden]
	TensorPredWeight   = "mod_pred.weight"      // [nEmbd], the linear predictor
	TensorPredBias     = "mod_pred.bias"        // [1], the linear predictor
)

// BlockTensor is the full name of a tensor of block i: "blk.3.attn_q.weight".
func BlockTensor(i int, name string) string { return fmt.Sprintf("blk.%d.%s", i, name) }
