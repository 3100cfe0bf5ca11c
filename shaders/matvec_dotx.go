package shaders

import (
	"math"
	"slices"
	"strings"
)

// dot_x.comp and matvec_dot's PREQ variants: a batched step's vectors of x
// quantized to 8 bits once for the step (dot_x), and the matvec reading
// them (docs/matvec-cost.md, "Batched"), where matvec_dot's own variants
// quantize every vector in every workgroup.

// MatvecDotPre marks matvec_dot's variants that read x quantized by
// dot_x: MatvecFusedName(typ, ReduceSubgroupDot+MatvecDotPre, fuse).
// Their bindings are w, xq (DotXBytes' layout) and y: the norm's weight is
// dot_x's.
const MatvecDotPre = "_pre"

// DotXName is dot_x's variant for the weights of typ (MatvecDotTypes: its
// block, MatvecDotBlock) under the matvec's fusion fuse (the norm's weight
// applied with FuseNorm and FuseNormSwiGLU).
func DotXName(typ, fuse string) string {
	name := "dot_x_b32"
	if MatvecDotBlock(typ) == 256 {
		name = "dot_x_b256"
	}
	if fuse == FuseNorm || fuse == FuseNormSwiGLU {
		name += "_norm"
	}
	return name
}

// MatvecDotPreX is the dot_x variant a PREQ matvec variant reads x from,
// and whether name is one.
func MatvecDotPreX(name string) (dotx string, ok bool) {
	v, err := Lookup(name)
	if err != nil || !slices.Contains(v.Defines, "PREQ") {
		return "", false
	}
	return DotXName(v.Type, v.Fusion), true
}

// DotXBytes is the size of dot_x's output for n vectors of cols: per
// vector cols bytes of q, then per chunk of 32 three words (the halves'
// sums, the block's scale, the sum of squares).
func DotXBytes(n, cols uint32) uint64 { return uint64(n) * uint64(cols) * 11 / 8 }

// DotXGroups is dot_x's dispatch for n vectors of cols: 256 chunks of 32
// a workgroup, a row of workgroups a vector.
func DotXGroups(n, cols uint32) [3]uint32 { return [3]uint32{(cols/32 + 255) / 256, n, 1} }

// QuantizeDotX is dot_x's output for x ([n][cols]), times nw where nw is
// not nil (the norm's weight), in blocks of xb, computed in float32 on the
// host as the kernel computes it: what the self-check and the tests feed a
// PREQ matvec. A GPU whose division rounds otherwise than IEEE's may give
// a q one away where x*127/max|x| falls within an ulp of a half.
func QuantizeDotX(x, nw []float32, n, cols, xb int) []uint32 {
	chunks := cols / 32
	meta, nc := n*cols/4, n*chunks
	out := make([]uint32, meta+3*nc)
	for v := range n {
		row := x[v*cols : (v+1)*cols]
		for b := 0; b < cols; b += xb {
			val := make([]float32, xb)
			var amax float32
			bad := false
			for j := range xb {
				a := row[b+j]
				if nw != nil {
					a *= nw[b+j]
				}
				val[j] = a
				bad = bad || math.IsNaN(float64(a)) || math.IsInf(float64(a), 0)
				amax = max(amax, float32(math.Abs(float64(a))))
			}
			var id float32
			if amax > 0 {
				id = 127 / amax
			}
			d := amax / 127
			if bad {
				d = float32(math.NaN())
			}
			for c := b / 32; c < (b+xb)/32; c++ {
				g := v*chunks + c
				var ss float32
				for j := 0; j < 32; j += 4 { // as the kernel: a vec4's dot, then the chunk's sum
					r := row[32*c+j : 32*c+j+4]
					ss += r[0]*r[0] + r[1]*r[1] + r[2]*r[2] + r[3]*r[3]
				}
				var lo, hi int32
				for j := range 32 {
					q := int32(math.RoundToEven(float64(val[32*c-b+j] * id)))
					out[8*g+j/4] |= uint32(uint8(int8(q))) << (8 * (j % 4))
					if j < 16 {
						lo += q
					} else {
						hi += q
					}
				}
				out[meta+g] = uint32(lo)&0xffff | uint32(hi)<<16
				out[meta+nc+g] = math.Float32bits(d)
				out[meta+2*nc+g] = math.Float32bits(ss)
			}
		}
	}
	return out
}

func init() {
	for _, xb := range []string{"b32", "b256"} {
		for _, norm := range []bool{false, true} {
			v := Variant{
				Name: "dot_x_" + xb, Source: "dot_x.comp", Op: OpDotX,
				Bindings: []Binding{
					{"x", Read, "[n][cols] f32"},
					{"xq", Write, "[n][cols/4] q (4 int8 a word), then [n][cols/32] each: the chunks' halves' sums (int16 pairs), their blocks' scales, their sums of squares: DotXBytes(n, cols)"},
				},
				Push:      MatvecPush{},
				LocalSize: [3]uint32{256, 1, 1},
				Notes: "x quantized to 8 bits once for a batched step's PREQ matvecs (MatvecDotPreX); dispatch DotXGroups(n, cols); " +
					"cols a multiple of the block (" + strings.TrimPrefix(xb, "b") + ")",
			}
			if xb == "b256" {
				v.Defines = append(v.Defines, "XB_WIDE")
			}
			if norm {
				v.Name += "_norm"
				v.Defines = append(v.Defines, "NORM")
				v.Bindings = append(v.Bindings, Binding{"normw", Read, "[cols] f32"})
				v.Notes += "; x times normw, and each chunk's sum of squares of the raw values"
			}
			Variants = append(Variants, v)
		}
	}
	for _, typ := range MatvecDotTypes {
		for _, fuse := range MatvecFusions {
			v := matvecDotVariant(typ, fuse)
			v.Name = MatvecFusedName(typ, ReduceSubgroupDot+MatvecDotPre, fuse)
			v.Defines = append(append([]string(nil), v.Defines...), "PREQ")
			v.Bindings = append([]Binding(nil), v.Bindings[:3]...)
			v.Bindings[1] = Binding{"xq", Read, "x quantized by dot_x (DotXName(typ, fuse)): DotXBytes(n, cols)"}
			v.Notes += "; x read quantized from dot_x's output (the norm's weight applied there)"
			Variants = append(Variants, v)
		}
	}
}
