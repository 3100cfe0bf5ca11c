package shaders

import "fmt"

// PlanesPush is planes.comp's push-constant block (include/push_direct.glsl).
type PlanesPush struct {
	Rows  uint32 // rows of the matrix written (from WRow0); rows past it are zero
	Cols  uint32 // its columns (a weight type's block divides it)
	WRow0 uint32 // the first row read, of the binding's
	WRows uint32 // rows in the binding (where the split layouts' scales start)
	RowsP uint32 // rows of each plane
	ColsP uint32 // halves a plane's row, a multiple of 4
	LoOff uint32 // 8-half units from the hi plane's start to the lo plane's (the hilo variants): PlaneUnits
}

// MatmulDirectPush is matmul_direct.comp's push-constant block.
type MatmulDirectPush struct {
	Rows  uint32 // outputs per token written
	N     uint32 // tokens written
	ColsP uint32 // halves a plane's row (W's and X's), a multiple of 32
	LdY   uint32 // elements per y row
	YOff  uint32 // the column of y that row 0's output goes to
	WLo   uint32 // the hilo kernel: W's lo plane in 8-half units from the binding's start; 0: none
	XLo   uint32 // the hilo kernel: X's lo plane in 8-half units from the binding's start
	// KSplit is the columns of each K slice (a multiple of 32) of a
	// split product (MatmulDirectSplitGroups: workgroup z walks slice z
	// into y = [splits][N][Rows] partial sums for splitk_reduce; LdY and
	// YOff unused); 0 walks all of K into y.
	KSplit uint32
}

// MatmulDirectSpec is matmul_direct's specialization constants: a
// workgroup computes BM tokens by BN rows, each subgroup of 32 a block of
// WM tokens by WN rows in 16x16 tiles (WM, WN multiples of 16).
type MatmulDirectSpec struct{ BM, BN, WM, WN uint32 }

// MatmulDirectMinRows is the fewest rows a GPU profile's direct matmul
// takes (Profile.MatmulDirectMin): below it W's planes pass, a read of W
// and a write of two bytes a weight a plane, costs more than the product.
const MatmulDirectMinRows = 64

// MatmulDirectSpecGPU: 4 subgroups of 2x4 tiles on a 64x128 tile (not yet
// measured: BenchmarkMatmulGPU's direct-* candidates compare it).
var MatmulDirectSpecGPU = MatmulDirectSpec{BM: 64, BN: 128, WM: 32, WN: 64}

// Subgroups is the number of subgroups of a workgroup.
func (s MatmulDirectSpec) Subgroups() uint32 { return (s.BM / s.WM) * (s.BN / s.WN) }

// Constants is the spec as specialization constants 0..4 (constant 0 is the
// workgroup size).
func (s MatmulDirectSpec) Constants() []uint32 {
	return []uint32{MatmulCoopSubgroup * s.Subgroups(), s.BM, s.BN, s.WM, s.WN}
}

// Check says whether the tiles divide as the kernel needs.
func (s MatmulDirectSpec) Check() error {
	switch {
	case s.WM == 0 || s.WN == 0 || s.WM%16 != 0 || s.WN%16 != 0:
		return fmt.Errorf("shaders: matmul_direct spec %+v: WM and WN must be positive multiples of 16", s)
	case s.BM%s.WM != 0 || s.BN%s.WN != 0:
		return fmt.Errorf("shaders: matmul_direct spec %+v: WM must divide BM and WN divide BN", s)
	}
	return nil
}

// Pad is the planes' shape for rows of W, n tokens and cols columns: rows
// and tokens padded to whole workgroup tiles, columns to 32 (the kernel's
// step).
func (s MatmulDirectSpec) Pad(rows, n, cols uint32) (rowsP, nP, colsP uint32) {
	return roundUp(rows, s.BN), roundUp(n, s.BM), roundUp(cols, 32)
}

func roundUp(v, m uint32) uint32 { return (v + m - 1) / m * m }

// PlaneUnits is a rows x cols plane of halves in 8-half units (a uvec4):
// the unit of every lo plane's offset (PlanesPush.LoOff, MatmulDirectPush's
// WLo and XLo), the lo plane following the hi one. cols is a multiple of
// 32 (Pad).
func PlaneUnits(rows, cols uint32) uint32 { return rows * cols / 8 }

// PlanesBytes is the size of rows x cols planes of halves: the hi plane,
// and with lo the lo plane after it.
func PlanesBytes(rows, cols uint32, lo bool) uint64 {
	b := 2 * uint64(rows) * uint64(cols)
	if lo {
		b *= 2
	}
	return b
}

// MatmulDirectGroups is matmul_direct's dispatch for rows of W and n
// tokens: x over row tiles, y over token tiles.
func MatmulDirectGroups(rows, n uint32, s MatmulDirectSpec) [3]uint32 {
	return [3]uint32{(rows + s.BN - 1) / s.BN, (n + s.BM - 1) / s.BM, 1}
}

// MatmulDirectSplitGroups is matmul_direct's dispatch split into splits K
// slices (MatmulDirectPush.KSplit): MatmulDirectGroups' grid, z over the
// slices.
func MatmulDirectSplitGroups(rows, n uint32, s MatmulDirectSpec, splits uint32) [3]uint32 {
	g := MatmulDirectGroups(rows, n, s)
	g[2] = max(1, splits)
	return g
}

const (
	// MatmulDirectGroupsPerUnit is how many of the GPU preset's
	// workgroups (4 warps of ~180 registers a thread with hilo:
	// docs/matmul-cost.md) an SM holds at once: 2, by registers (a
	// workgroup takes 23,000 of an SM's 65,536).
	MatmulDirectGroupsPerUnit = 2
	// MatmulDirectSplitTarget is Profile.MatmulDirectSlots where the
	// device does not say how many compute units it has: 2 workgroups an
	// SM of a 132-SM H100 SXM or H200. A workgroup of the GPU preset (64
	// tokens x 128 rows) makes the 1.1B model's 2048-row matrices at 512
	// tokens a grid of 128, under one workgroup an SM (4 warps to hide
	// each step's L2 round trip), its 256-row K and V a grid of 16, and a
	// routed block's 64 rows at capacity 1/8 a grid of 16 and of 2. A
	// grid of at most half the slots is cut along K into slots/grid
	// slices (at most MatmulMaxSplits), one wave of workgroups, whose
	// partial sums splitk_reduce adds: 8 bytes a token a row a slice
	// written and read, against 2 x 32 FMAs a token a row a slice step.
	MatmulDirectSplitTarget = 264
	// MatmulDirectMinSlice is a GPU profile's fewest columns of a slice
	// (Profile.MatmulDirectSlice): 8 steps of 32, so a workgroup's start
	// (the first tiles' round trip) and its partial sums' write stay under
	// its products.
	MatmulDirectMinSlice = 256
)

// MatmulDirectSplit is how the direct product of n tokens through rows of
// W with colsP columns of planes (a multiple of 32) and tile s is cut
// along K on this profile, in at most most slices (the scratch for the
// partial sums holds no more): splits slices of slice columns each (the
// last may be shorter), slice a multiple of 32. splits is 1 (slice =
// colsP) on a profile that does not split (MatmulSplitTarget 0: CPU
// devices) or where the grid is big enough.
func (p Profile) MatmulDirectSplit(rows, n, colsP uint32, s MatmulDirectSpec, most uint32) (splits, slice uint32) {
	if p.MatmulSplitTarget == 0 || n == 0 || most < 2 || s.BM == 0 || s.BN == 0 {
		return 1, colsP
	}
	g := MatmulDirectGroups(rows, n, s)
	grid := g[0] * g[1]
	slots := p.MatmulDirectSlots
	if slots == 0 {
		slots = MatmulDirectSplitTarget
	}
	want := min(MatmulMaxSplits, most, slots/max(grid, 1))
	if grid == 0 || want < 2 {
		return 1, colsP
	}
	slice = max(roundUp((colsP+want-1)/want, 32), roundUp(max(p.MatmulDirectSlice, 32), 32))
	if slice >= colsP {
		return 1, colsP
	}
	return (colsP + slice - 1) / slice, slice
}

// PlanesGroups is planes' dispatch for planes of rowsP x colsP halves (an
// invocation a quad).
func PlanesGroups(rowsP, colsP uint32) [3]uint32 { return ElementGroups(rowsP * colsP / 4) }

// PlanesName is planes.comp's variant for weight type typ (F32 for X):
// the high halves only, or with hilo the low halves too.
func PlanesName(typ string, hilo bool) string {
	if hilo {
		return "planes_hilo_" + typ
	}
	return "planes_" + typ
}

// MatmulDirectName is matmul_direct.comp's variant: its operands' high
// halves only or (hilo) f32's precision from three products, on tensor
// cores or (emulate) in plain arithmetic (every device runs it; CI does).
// The engine's under Profile.MatmulDirect (MODRUN_MATMUL_DIRECT=1), and
// BenchmarkMatmulGPU's direct-* candidates.
func MatmulDirectName(hilo, emulate bool) string {
	name := "matmul_direct"
	if hilo {
		name += "_hilo"
	}
	if emulate {
		name += "_emu"
	}
	return name
}

func init() {
	for _, wt := range WeightTypes {
		for _, hilo := range []bool{false, true} {
			v := Variant{
				Name: PlanesName(wt.Name, hilo), Source: "planes.comp", Defines: append([]string(nil), wt.Defines...),
				Bindings: []Binding{
					{"w", Read, wt.Shape + " (X: [n][cols] f32)"},
					{"planes", Write, "[rowsP][colsP] halves (two a word): hi, then at loOff 8-half units lo (hilo)"},
				},
				Push: PlanesPush{}, LocalSize: [3]uint32{256, 1, 1},
				Notes: "dispatch PlanesGroups(rowsP, colsP); matmul_direct's operands (MatmulDirectSpec.Pad)",
			}
			if hilo {
				v.Defines = append(v.Defines, "PLANES_HILO")
			}
			Variants = append(Variants, v)
		}
	}
	for _, hilo := range []bool{false, true} {
		for _, emulate := range []bool{false, true} {
			v := Variant{
				Name: MatmulDirectName(hilo, emulate), Source: "matmul_direct.comp",
				Bindings: []Binding{
					{"w", Read, "planes of W (planes.comp): [rowsP][colsP] halves, lo at wLo"},
					{"x", Read, "planes of X: [nP][colsP] halves, lo at xLo"},
					{"y", Write, "[n][ldy] f32, columns [yOff, yOff+rows)"},
				},
				Push: MatmulDirectPush{}, LocalSize: [3]uint32{128, 1, 1}, LocalSizeSpec: true,
				Spec:  MatmulDirectSpecGPU.Constants(),
				Notes: "Spec: MatmulDirectSpec.Constants(); dispatch MatmulDirectGroups(rows, n, spec); planes padded by MatmulDirectSpec.Pad",
			}
			if hilo {
				v.Defines = append(v.Defines, "DIRECT_HILO")
			}
			if emulate {
				v.Defines = append(v.Defines, "EMULATE_COOPMAT")
			} else {
				v.Notes += "; needs VK_NV_cooperative_matrix (Device.CooperativeMatrixNV) and a subgroup size of 32"
			}
			v.Op = OpMatmulDirect // the self-check covers it (Profile.Fallback)
			Variants = append(Variants, v)
		}
	}
}
