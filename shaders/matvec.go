package shaders

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strings"
)

// matvec, the decode matrix-vector product (matvec.comp): one variant per
// weight type (WeightTypes), reduction and fusion. The quantized variants
// read the layouts the weight table repacks to (RepackQ8_0, RepackQ4_0,
// RepackSubblock), not the file's ggml blocks.

// Matvec reductions: how a row's invocations add their partial sums.
const (
	// ReduceShared is a tree in shared memory with barriers: core Vulkan,
	// any invocations per row (1: no barrier at all).
	ReduceShared = ""
	// ReduceSubgroup is subgroupAdd over one subgroup per row: needs subgroup
	// arithmetic, and invocations per row = the device's subgroup size.
	ReduceSubgroup = "_sg"
	// ReduceLanes is matvec_lanes.comp (Q8_0 only, a CPU device with
	// subgroups of 8: MatvecLanesSpecCPU): rows an invocation, nothing to
	// add across invocations; the 8 lanes of a subgroup load a block of x
	// a vec4 each and share it by subgroupBroadcast.
	ReduceLanes = "_lanes"
	// ReduceSubgroupRows is matvec_rows.comp (a GPU's decode: MatvecRowsTypes,
	// rows of a multiple of 32 columns): RPS rows a subgroup, each lane a
	// 32-weight chunk of all of them at a time, weights decoded without
	// conversion instructions, summed by subgroupAdd. Spec: [workgroup
	// size, the subgroup size, vectors per pass, rows per subgroup].
	ReduceSubgroupRows = "_sgrows"
	// ReduceSubgroupWords is matvec_words.comp (MatvecWordsTypes): as
	// ReduceSubgroupRows, its lanes reading the rows in small interleaved
	// units (8 weights) so that the loads of x are near each other; the
	// same spec. Not chosen by a profile yet: BenchmarkMatvecGPU's.
	ReduceSubgroupWords = "_sgwords"
	// ReduceSubgroupDot is matvec_dot.comp (MatvecDotTypes): as
	// ReduceSubgroupWords, its products integer dot products against x
	// quantized to 8 bits in shared memory, a tile of columns at a time;
	// needs integer dot products. Spec: MatvecDotSpec (the decode's one
	// vector), MatvecDotBatchSpec (a batched step's). Chosen with
	// Profile.MatvecDot.
	ReduceSubgroupDot = "_sgdot"
)

// MatvecDotTypes are the weight types matvec_dot.comp reads: every
// quantized type matvec_rows reads.
var MatvecDotTypes = matvecRowsPicks

// MatvecDotBlock is the block x is quantized in for weights of typ by
// matvec_dot, as the CPU backend quantizes its activations for them: 256
// for the K-quants (ggml's Q8_K), else 32.
func MatvecDotBlock(typ string) int {
	if f, ok := subblockOf[typ]; ok && f.super == 256 {
		return 256
	}
	return 32
}

// MatvecDotSpec is matvec_dot's spec for one vector of rows of typ and
// cols on a device whose subgroups are sg: [4 sg, sg, 1 vector, 4 rows a
// subgroup, groups in flight, columns a tile]. Groups in flight: 1 of
// Q8_0 (10 words a group), 2 of the other types (4 to 8 words), so that a
// lane holds about as many registers of weights. The tile: cols rounded
// up to a multiple of 1,024, and at least 4,096 (4.6 KB of shared memory
// for Q8_0, 5.0-5.1 KB for the others, which keep the sums of x's halves too),
// so that a model's matrices share few pipelines and the self-check's rows
// fit any of them: one tile a row.
func MatvecDotSpec(typ string, sg, cols uint32) []uint32 {
	units := uint32(2)
	if typ == MatvecQ8_0 {
		units = 1
	}
	return []uint32{4 * sg, sg, 1, 4, units, max(4096, (cols+1023)/1024*1024)}
}

// MatvecDotBatchSpec is matvec_dot's spec for a batched step's nb vectors
// a pass of cols: 4 rows walked below 8 vectors, 2 from 8 (a subgroup's
// rows halved under SwiGLU), so that the sums (rows walked x vectors)
// stay within 32, one group in flight a row, and tiles of up to 2,048
// columns (at 16 vectors 42 KB of shared memory: NVIDIA's 48 KB holds
// it). With 4 rows walked at 16 vectors RADV's compiler for RDNA3 spilled
// 11-64 registers, and 2 at 8 vectors for Q4_1 and Q5_1 under the norm
// (TestMatvecDotRegistersRDNA3).
func MatvecDotBatchSpec(fuse string, sg, nb, cols uint32) []uint32 {
	walk := uint32(4)
	if nb >= 8 {
		walk = 2
	}
	return []uint32{4 * sg, sg, nb, max(walk/matvecWalks(fuse), 1), 1, min(2048, (cols+255)/256*256)}
}

// Matvec fusions (matvec.comp): what the kernel does besides y = W x.
const (
	FuseNone       = ""
	FuseAdd        = "_add"         // y += W x: the residual add
	FuseNorm       = "_norm"        // y = W rmsnorm(x, normw, eps)
	FuseNormSwiGLU = "_norm_swiglu" // y = silu(Wg xn) * (Wu xn), xn = rmsnorm(x), W = [Wg; Wu]
)

// MatvecFusions are every fusion, in the table's order.
var MatvecFusions = []string{FuseNone, FuseAdd, FuseNorm, FuseNormSwiGLU}

// MatvecName is the variant of matvec for weight type typ (MatvecTypes) and
// reduction (ReduceShared or ReduceSubgroup), unfused.
func MatvecName(typ, reduce string) string { return "matvec_" + typ + reduce }

// MatvecFusedName is MatvecName with a fusion (MatvecFusions).
func MatvecFusedName(typ, reduce, fuse string) string { return MatvecName(typ, reduce) + fuse }

func matvecFusedVariant(typ, reduce, fuse string) Variant {
	v := matvecVariant(typ, reduce)
	v.Name += fuse
	v.Fusion = fuse
	switch fuse {
	case FuseAdd:
		v.Defines = append(v.Defines, "ADD")
		v.Bindings[2] = Binding{"y", ReadWrite, "[n][rows] f32, added to (the residual stream)"}
	case FuseNorm, FuseNormSwiGLU:
		v.Defines = append(v.Defines, "NORM")
		v.Bindings = append(v.Bindings, Binding{"normw", Read, "[cols] f32 RMSNorm weight"})
		v.Notes += "; x is RMSNorm'd with normw and MatvecPush.Eps first"
		if fuse == FuseNormSwiGLU {
			v.Defines = append(v.Defines, "SWIGLU")
			v.Bindings[0].Shape = "gate and up stacked, [2*rows][cols], as " + v.Bindings[0].Shape
			v.Notes += "; w is gate and up stacked (2*rows rows, one matrix: split together), y = silu(gate x) * (up x)"
		}
	}
	return v
}

func matvecVariant(typ, reduce string) Variant {
	wt, err := Weight(typ)
	if err != nil {
		panic(err) // the variant table names a type the weight table lacks: a build bug
	}
	v := Variant{
		Name: MatvecName(typ, reduce), Source: "matvec.comp", Defines: append([]string(nil), wt.Defines...),
		Op: OpMatvec, Type: typ, Reduce: reduce,
		Bindings: []Binding{
			{"w", Read, wt.Shape},
			{"x", Read, "[n][cols] f32"},
			{"y", Write, "[n][rows] f32"},
		},
		Push:          MatvecPush{},
		LocalSize:     [3]uint32{64, 1, 1},
		LocalSizeSpec: true,
		Spec:          []uint32{64, 64, 1, 1},
		Notes: "Spec: [workgroup size, invocations per row, vectors per pass, rows per invocation], from Profile.Matvec; " +
			"dispatch MatvecGroups(rows, spec); bind w with its size rounded up to 4 (vk buffers are); " +
			"cols a multiple of the type's block (WeightType.Block)",
	}
	if reduce == ReduceSubgroup {
		v.Defines = append(v.Defines, "REDUCE_SUBGROUP")
		v.Spec = []uint32{64, 32, 1, 1} // a 32-wide subgroup's
		v.Notes += "; needs subgroup arithmetic, and invocations per row = the device's subgroup size"
	}
	return v
}

// matvecLanesVariant is matvec_lanes.comp with fusion fuse: matvec's
// bindings and push constants, Q8_0 in the split layout.
func matvecLanesVariant(fuse string) Variant {
	v := matvecFusedVariant(MatvecQ8_0, ReduceShared, fuse)
	v.Name, v.Source, v.Reduce = MatvecFusedName(MatvecQ8_0, ReduceLanes, fuse), "matvec_lanes.comp", ReduceLanes
	v.LocalSize, v.Spec = [3]uint32{8, 1, 1}, append([]uint32(nil), MatvecLanesSpecCPU...)
	v.Notes += "; a workgroup is one subgroup of 8 (the pipeline requires the size), RPI rows an invocation, NB vectors a pass"
	return v
}

// MatvecRowsTypes are the weight types matvec_rows.comp reads: all but F32
// (no decode matrix of a real model is F32).
var MatvecRowsTypes = []string{MatvecF16, MatvecBF16, MatvecQ8_0, MatvecQ4_0, MatvecQ4_1, MatvecQ5_0, MatvecQ5_1,
	MatvecQ2_K, MatvecQ3_K, MatvecQ4_K, MatvecQ5_K, MatvecQ6_K}

// MatvecRowsSpec is matvec_rows's default spec on a device with subgroups
// of sg: four subgroups a workgroup, one vector a pass, four rows a
// subgroup (on an H200 every quantized shape ran fastest at 4 of the 1, 2
// and 4 measured, at NB 1, 8 and 16: gpu-results run A).
func MatvecRowsSpec(sg uint32) []uint32 { return []uint32{4 * sg, sg, 1, 4} }

// matvecRowsPicks are the types a profile with MatvecRows runs on
// matvec_rows: the quantized ones. F16 and BF16 keep matvec.comp's
// subgroup variant, which streamed F16 at 72-74% of the probe on an H200
// where matvec_rows reached 45-50% (run A): its lanes read x and the
// weights 16 bytes apart, coalesced, where matvec_rows's read 32-weight
// chunks (64 bytes of F16) a lane apart.
var matvecRowsPicks = []string{MatvecQ8_0, MatvecQ4_0, MatvecQ4_1, MatvecQ5_0, MatvecQ5_1,
	MatvecQ2_K, MatvecQ3_K, MatvecQ4_K, MatvecQ5_K, MatvecQ6_K}

// matvecRowsVariant is matvec_rows.comp for weight type typ with fusion
// fuse: matvec's bindings and push constants.
func matvecRowsVariant(typ, fuse string) Variant {
	v := matvecFusedVariant(typ, ReduceShared, fuse)
	v.Name, v.Source, v.Reduce = MatvecFusedName(typ, ReduceSubgroupRows, fuse), "matvec_rows.comp", ReduceSubgroupRows
	v.LocalSize, v.Spec = [3]uint32{128, 1, 1}, MatvecRowsSpec(32)
	v.Notes = "Spec: [workgroup size, the subgroup size, vectors per pass, rows per subgroup]; dispatch MatvecGroups(rows, spec); " +
		"cols a multiple of 32; needs subgroup arithmetic with the workgroup's subgroups all of the spec's size"
	if fuse == FuseNorm || fuse == FuseNormSwiGLU {
		v.Notes += "; x is RMSNorm'd with normw and MatvecPush.Eps first"
	}
	if fuse == FuseNormSwiGLU {
		v.Notes += "; w is gate and up stacked (2*rows rows), y = silu(gate x) * (up x)"
	}
	return v
}

// matvecDotVariant is matvec_dot.comp's variant for weights of typ under
// fuse.
func matvecDotVariant(typ, fuse string) Variant {
	v := matvecRowsVariant(typ, fuse)
	v.Name, v.Source, v.Reduce = MatvecFusedName(typ, ReduceSubgroupDot, fuse), "matvec_dot.comp", ReduceSubgroupDot
	v.Spec = MatvecDotSpec(typ, 32, 4096)
	v.Notes = strings.Replace(v.Notes, "vectors per pass, rows per subgroup]", "vectors per pass, rows per subgroup, groups a lane loads ahead per row, "+
		"columns a tile (a multiple of 256: x's quantized copy in shared memory holds NB vectors of it, 1.125 to 1.27 bytes a column)]", 1) +
		fmt.Sprintf("; x quantized to 8 bits a block of %d as the CPU backend's activations; needs integer dot products", MatvecDotBlock(typ))
	return v
}

// matvec_rows's decodings, for BenchmarkMatvecGPU to tell on a GPU what
// the weight conversion costs (Q8_0 and Q4_K; the variants' reduce is
// ReduceSubgroupRows plus the suffix, their Reduce field
// ReduceSubgroupRows):
const (
	// MatvecRowsI2F converts with the int-to-float instruction, as
	// matvec.comp does (16 a clock per SM on NVIDIA).
	MatvecRowsI2F = "_i2f"
	// MatvecRowsShift shifts each byte down before the 2^23 trick; the
	// default leaves bytes in place in the float's mantissa where they fit
	// (scaled by 256^-t in the block's scale): fewer shifts, 5-13% faster
	// at 4 rows a subgroup on an H200 (gpu-results run A).
	MatvecRowsShift = "_shift"
)

// MatvecRowsDecodings are the decodings besides the default one.
var MatvecRowsDecodings = map[string]string{MatvecRowsI2F: "CONVERT_I2F", MatvecRowsShift: "MAGIC_SHIFT"}

// MatvecWordsFixed names matvec_words's variants with NB 1 and 4 rows a
// subgroup compiled in (its reduce is ReduceSubgroupWords plus it).
const MatvecWordsFixed = "_fixed"

// MatvecWordsTypes are the weight types matvec_words.comp reads.
var MatvecWordsTypes = []string{MatvecF16, MatvecQ8_0, MatvecQ4_1, MatvecQ4_K}

func init() {
	for _, typ := range MatvecWordsTypes {
		for _, fuse := range MatvecFusions {
			v := matvecRowsVariant(typ, fuse)
			v.Name, v.Source, v.Reduce = MatvecFusedName(typ, ReduceSubgroupWords, fuse), "matvec_words.comp", ReduceSubgroupWords
			v.Spec = append(v.Spec, 4) // and units in flight a lane (Profile.MatvecBatch: fewer at many vectors)
			v.Notes = strings.Replace(v.Notes, "rows per subgroup]", "rows per subgroup, units a lane loads ahead per row]", 1)
			Variants = append(Variants, v)
			// NB 1 and 4 rows a subgroup as compile-time constants (spec
			// [4 sg, sg, 1, 4] only): BenchmarkMatvecGPU's words-r4-fixed.
			f := v
			f.Name = MatvecFusedName(typ, ReduceSubgroupWords+MatvecWordsFixed, fuse)
			f.Defines = append(append([]string(nil), v.Defines...), "FIXED_NB_RPS")
			f.Notes += "; NB 1, 4 rows a subgroup and 4 units fixed: spec [4*sg, sg, 1, 4, 4]"
			Variants = append(Variants, f)
		}
	}
	for _, typ := range MatvecRowsTypes {
		for _, fuse := range MatvecFusions {
			Variants = append(Variants, matvecRowsVariant(typ, fuse))
		}
	}
	for _, typ := range MatvecDotTypes {
		for _, fuse := range MatvecFusions {
			Variants = append(Variants, matvecDotVariant(typ, fuse))
		}
	}
	for _, typ := range HandoffMatvecTypes {
		for _, fuse := range handoffMatvecFusions {
			Variants = append(Variants, handoffVariant(matvecRowsVariant(typ, fuse)))
		}
	}
	for _, typ := range []string{MatvecQ8_0, MatvecQ4_K} {
		for _, dec := range []string{MatvecRowsI2F, MatvecRowsShift} {
			for _, fuse := range MatvecFusions {
				v := matvecRowsVariant(typ, fuse)
				v.Name = MatvecFusedName(typ, ReduceSubgroupRows+dec, fuse)
				v.Defines = append(v.Defines, MatvecRowsDecodings[dec])
				v.Notes += "; decoding " + dec[1:] + " (BenchmarkMatvecGPU's alternatives)"
				Variants = append(Variants, v)
			}
		}
	}
	for _, reduce := range []string{ReduceShared, ReduceSubgroup} {
		for _, typ := range MatvecTypes {
			for _, fuse := range MatvecFusions {
				Variants = append(Variants, matvecFusedVariant(typ, reduce, fuse))
			}
		}
	}
	for _, fuse := range MatvecFusions {
		Variants = append(Variants, matvecLanesVariant(fuse))
	}
}

// MatvecLoopIterations bounds the loop iterations one invocation of matvec
// runs for n vectors of cols with spec: per pass of NB vectors, its share of
// the row (each step with its NB inner iterations), the vector set-up and
// the tree sum. An element at a time bounds every weight type's walk (the
// scalar F32 path is the longest).
func MatvecLoopIterations(n, cols uint32, spec []uint32) uint32 {
	tpr, nb := spec[1], spec[2]
	if rpi := matvecRowsPerInvocation(spec); rpi > 1 {
		// rowsPass (sub-block types): per vector, a group at a time with its
		// RPI rows, and the set-up and stores of the RPI sums.
		return n * ((cols/32)*(1+rpi) + 2*rpi + 2)
	}
	passes := (n + nb - 1) / nb
	perPass := (cols+tpr-1)/tpr*(1+nb) + 3*nb + uint32(bits.Len32(tpr))*(1+nb)
	return passes * perPass
}

// MatvecGroups is the dispatch size of matvec over rows with spec.
func MatvecGroups(rows uint32, spec []uint32) [3]uint32 {
	perGroup := spec[0] / spec[1] * matvecRowsPerInvocation(spec)
	return Groups((rows + perGroup - 1) / perGroup)
}

// matvecRowsPerInvocation is spec's rows per invocation (constant 3; 1 when
// spec stops before it).
func matvecRowsPerInvocation(spec []uint32) uint32 {
	if len(spec) > 3 && spec[3] > 1 {
		return spec[3]
	}
	return 1
}

// RepackQ8_0 is ggml Q8_0 data of rows x cols (blocks of 34 bytes: an f16
// scale, 32 int8 quants) in matvec's split layout: every block's quants in
// order ([rows][cols] int8), then every scale ([rows][cols/32] f16). ggml's
// blocks leave the quants 2-aligned; split, each block's 32 quants are two
// aligned 16-byte loads. The GGUF file is not changed: this is done at upload.
func RepackQ8_0(ggml []byte, rows, cols int) ([]byte, error) {
	return repack(ggml, rows, cols, 32)
}

// RepackQ4_0 is ggml Q4_0 data of rows x cols (blocks of 18 bytes: an f16
// scale, 16 bytes of nibbles) in matvec's split layout: every block's 16
// nibble bytes in order ([rows][cols/2] bytes, one aligned 16-byte load a
// block), then every scale ([rows][cols/32] f16).
func RepackQ4_0(ggml []byte, rows, cols int) ([]byte, error) {
	return repack(ggml, rows, cols, 16)
}

// repack splits blocks of a 2-byte scale and qBytes of quants.
func repack(ggml []byte, rows, cols, qBytes int) ([]byte, error) {
	if cols%32 != 0 {
		return nil, fmt.Errorf("shaders: %d columns of 32-element blocks", cols)
	}
	blocks := rows * cols / 32
	if len(ggml) != blocks*(2+qBytes) {
		return nil, fmt.Errorf("shaders: %d bytes for %d blocks of %d", len(ggml), blocks, 2+qBytes)
	}
	out := make([]byte, blocks*(2+qBytes))
	scales := out[blocks*qBytes:]
	for b := 0; b < blocks; b++ {
		blk := ggml[b*(2+qBytes) : (b+1)*(2+qBytes)]
		binary.LittleEndian.PutUint16(scales[2*b:], binary.LittleEndian.Uint16(blk))
		copy(out[b*qBytes:], blk[2:])
	}
	return out, nil
}
