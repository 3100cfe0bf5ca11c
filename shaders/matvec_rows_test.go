package shaders

import (
	"fmt"
	"slices"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/stretchr/testify/require"
)

// matvecRowsSpecs are the specs TestMatvecRows runs matvec_rows with on a
// device of subgroups of sg: the default, rows a subgroup that leave the
// last subgroup short (3 rows: 67 = 22*3 + 1), one subgroup a workgroup,
// and passes of 4 vectors (6 vectors: a full pass and a short one).
// wordsSpec is spec (matvecRowsSpecs' si-th) for the kernel of reduce:
// matvec_words's (ReduceSubgroupWords) takes 1 and 2 units in flight a
// lane on the 3rd and 4th spec (constant 4, UNROLL: Profile.MatvecBatch's
// at 8 vectors and more), 4 on the others; matvec_rows has no constant 4.
func wordsSpec(reduce string, si int, spec []uint32) []uint32 {
	if reduce != ReduceSubgroupWords {
		return spec
	}
	return append(append([]uint32(nil), spec...), []uint32{4, 4, 1, 2}[si])
}

func matvecRowsSpecs(sg uint32) [][]uint32 {
	return [][]uint32{MatvecRowsSpec(sg), {sg, sg, 1, 1}, {4 * sg, sg, 4, 3}, {2 * sg, sg, 2, 4}}
}

// TestMatvecRows checks matvec_rows and matvec_words (every type they
// read, every fusion)
// against the float64 reference, on ragged row counts and rows of odd
// chunk counts per lane, with the tolerances of matvec's tests: it
// decodes each weight as the reference does (an exact integer, times its
// scale), and only the order of the sums differs. On lavapipe it runs at
// subgroups of 8, so the code path a GPU runs at 32 is tested in CI.
func TestMatvecRows(t *testing.T) {
	dev := openDevice(t)
	d := deviceOf(dev)
	if !d.SubgroupArithmetic || d.SubgroupSize == 0 {
		t.Skip("matvec_rows needs subgroup arithmetic and a known subgroup size; this device has neither sure")
	}
	const eps = 1e-5
	for _, typ := range matvecWeightTypes {
		name := matvecTypeOf[typ]
		if !slices.Contains(MatvecRowsTypes, name) {
			continue
		}
		// The types decode checks first (F16, Q8_0, Q4_0, Q4_K) get every
		// spec unfused and two specs fused; the others, whose code differs
		// only in loadChunk and weights4, two specs, unfused and with
		// SwiGLU (the walk of twice the rows). lavapipe compiles a pipeline
		// in about a second.
		core := slices.Contains(fusedFullTypes, typ) || typ == gguf.TypeQ4_K
		for si, spec := range matvecRowsSpecs(d.SubgroupSize) {
			for _, fuse := range MatvecFusions {
				odd := si == 0 || si == 2 // the default spec; 3 rows a subgroup in passes of 4 vectors
				if (core && fuse != FuseNone && !odd) || (!core && (!odd || (fuse != FuseNone && fuse != FuseNormSwiGLU))) {
					continue
				}
				reduces := []string{ReduceSubgroupRows}
				if (typ == gguf.TypeQ8_0 || typ == gguf.TypeQ4_K) && si == 2 && (fuse == FuseNone || fuse == FuseNormSwiGLU) {
					// the bench's other decodings (MatvecRowsDecodings), on one spec
					reduces = append(reduces, ReduceSubgroupRows+MatvecRowsI2F, ReduceSubgroupRows+MatvecRowsShift)
				}
				if slices.Contains(MatvecWordsTypes, name) {
					reduces = append(reduces, ReduceSubgroupWords) // with fewer units in flight on the odd specs: wordsSpec
					if fmt.Sprint(spec) == fmt.Sprint([]uint32{4 * d.SubgroupSize, d.SubgroupSize, 1, 4}) {
						reduces = append(reduces, ReduceSubgroupWords+MatvecWordsFixed) // its only spec
					}
				}
				for _, reduce := range reduces {
					v, err := Lookup(MatvecFusedName(name, reduce, fuse))
					require.NoError(t, err)
					k := newKernel(t, dev, v, wordsSpec(reduce, si, spec)...)
					cols := []int{32, 96, 160, 320} // 1, 3, 5, 10 chunks: lanes with none, one and two
					if typ.BlockSize() == 256 {
						cols = []int{256, 768}
					}
					rowsList, ns := []int{1, 7, 67}, []int{1, 3, 6}
					if fuse != FuseNone { // the fusions' code is the same for every type: fewer shapes
						cols, ns = cols[len(cols)-1:], []int{1, 6}
					}
					for _, rows := range testRows(typ, rowsList) {
						for _, c := range cols {
							for _, n := range ns {
								label := fmt.Sprintf("%s/%s%v%s/%dx%d/n%d", typ, reduce, wordsSpec(reduce, si, spec), fuse, rows, c, n)
								wRows := rows
								if fuse == FuseNormSwiGLU {
									wRows = 2 * rows
								}
								mc, err := newMatvecCase(typ, wRows, c, n, int64(rows*1000+c*10+n))
								require.NoError(t, err, label)
								if fuse == FuseNone {
									if err := closeness(mc.run(t, dev, k), mc.want, mc.scale, matvecTolerance[typ]); err != nil {
										t.Errorf("%s: %v", label, err)
									}
									continue
								}
								got, want, scale := runFused(t, dev, k, mc, fuse, rows, eps)
								if err := closeness(got, want, scale, matvecTolerance[typ]); err != nil {
									t.Errorf("%s: %v", label, err)
								}
							}
						}
					}
				}
			}
		}
	}
}
