package shaders

// Plans: the dispatches a decode stage records, in order, as the profile
// chooses them, so that the engine records what it is handed and decides
// nothing between variants (DESIGN.md §6: kernel choice lives in Profile).
// Each step says its role, which the engine binds by, and the variant (or,
// for a matvec, the fusion: the variant then depends on each matrix's type
// and columns, Profile.Matvec).

// Step is one dispatch of a plan.
type Step struct {
	Role    Role
	Variant string   // the kernel; "" for RoleMatvec (Profile.Matvec of each matrix with Fusion)
	Spec    []uint32 // its specialization; nil: the variant's (fitted to the device)
	Fusion  string   // RoleMatvec's fusion (MatvecFusions)
}

// Role is what a plan's step does, which says how the engine binds it.
type Role int

const (
	RoleNorm           Role = iota // rmsnorm of the row into the norm's output
	RoleMatvec                     // each matrix of a stack on the row, fused as Step.Fusion says
	RoleSwiGLU                     // swiglu of gate and up
	RoleArgmax                     // the logits' argmax
	RoleAttend                     // decode_attend: RoPE, the KV append and attention, one dispatch
	RoleKV                         // decode_kv: RoPE and the KV append
	RoleAttention                  // decode_attention over the cache, one pass
	RoleAttentionSplit             // flash-decoding's first pass: the cache in chunks
	RoleCombine                    // flash-decoding's merge of the chunks
)

// normed is a stack of matvecs on the RMSNorm of one row: the norm folded
// into each matvec (FuseNorm), or its own dispatch first.
func (p Profile) normed() []Step {
	if p.FuseNorm {
		return []Step{{Role: RoleMatvec, Fusion: FuseNorm}}
	}
	return []Step{{Role: RoleNorm, Variant: "rmsnorm"}, {Role: RoleMatvec, Fusion: FuseNone}}
}

// AttentionInput is the decode step's q, k and v: matvecs on the normed
// row.
func (p Profile) AttentionInput() []Step { return p.normed() }

// DecodeAttention is the decode step's attention over a cache of kv
// entries holding ctx of them, for heads of hd elements: decode_attend_keys
// (AttendKeys) or decode_attend alone (FuseAttention), else decode_kv, then
// decode_attention in one pass, or its split pass and the combine when the
// cache splits (AttentionSplits).
func (p Profile) DecodeAttention(kv KV, ctx int, hd uint32) []Step {
	splits := p.AttentionSplits(ctx)
	if p.FuseAttention && p.AttendKeys {
		return []Step{{Role: RoleAttend, Variant: DecodeAttendKeysName(kv), Spec: DecodeAttendKeysSpec(hd, splits)}}
	}
	if p.FuseAttention {
		return []Step{{Role: RoleAttend, Variant: DecodeAttendName(kv), Spec: DecodeAttendSpec(splits)}}
	}
	steps := []Step{{Role: RoleKV, Variant: DecodeKVName(kv)}}
	if splits <= 1 {
		return append(steps, Step{Role: RoleAttention, Variant: DecodeAttentionName(kv)})
	}
	return append(steps, Step{Role: RoleAttentionSplit, Variant: DecodeAttentionSplitName(kv), Spec: DecodeAttentionSplitSpec(splits)},
		Step{Role: RoleCombine, Variant: "decode_attention_combine"})
}

// GateUp is the decode step's MLP input, SwiGLU(gate xn, up xn): one
// matvec that norms, multiplies and gates (FuseNormSwiGLU) where norms
// fold and gate and up are one matrix of two equal halves (stacked), else
// the normed matvecs and swiglu.
func (p Profile) GateUp(stacked bool) []Step {
	if p.FuseNorm && stacked {
		return []Step{{Role: RoleMatvec, Fusion: FuseNormSwiGLU}}
	}
	return append(p.normed(), Step{Role: RoleSwiGLU, Variant: "swiglu"})
}

// Head is the decode step's head: the output matvec on the normed last
// row, and the logits' argmax: argmax_wide (a row over many workgroups) on
// GPUs, where argmax's one workgroup a row took 59 us a call at a
// vocabulary of 32,000 on an H200; argmax on CPU devices, whose threads a
// row's one workgroup already fills and where the hand-off would be one
// more pass (RowSpecCPU's measurements), and on a GPU where argmax_wide
// failed its self-check (ArgmaxRow).
func (p Profile) Head() []Step {
	if !p.CPU && !p.ArgmaxRow {
		return append(p.normed(), Step{Role: RoleArgmax, Variant: "argmax_wide", Spec: ArgmaxWideSpec})
	}
	return append(p.normed(), Step{Role: RoleArgmax, Variant: "argmax"})
}
