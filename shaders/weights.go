package shaders

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Weight types on the GPU: the one table that says, for each ggml weight
// type, how its bytes are laid out on the device (repacked at upload or as
// in the file) and which define selects its reader in matvec.comp,
// matmul.comp and embed.comp. Every matvec, matmul and embed variant of a
// type is made from its row here, so a new type is one row (and its reader
// in the shaders).
//
// The 32-element types other than Q8_0 and Q4_0 (Q4_1, Q5_0, Q5_1) and the
// K-quants (Q2_K..Q6_K) share one layout, the sub-block layout
// (RepackSubblock), read by include/subblock.glsl: each value is
// x = (d*sc) * (q - zero) - (dmin*m), with q an unsigned integer of the
// type's bits, sc and m a sub-block's 8-bit scale and min, and d and dmin
// its super-block's half-precision scales, which is ggml's arithmetic for
// every one of them (ggml-quants.c dequantize_row_*), product by product.

// WeightType is one weight type as the GPU kernels read it.
type WeightType struct {
	Name    string   // the variants' suffix: "q4_k" (MatvecName, MatmulName, EmbedName)
	GGML    string   // ggml's name of the type: "Q4_K"
	Defines []string // selects the type's reader in matvec.comp, matmul.comp and embed.comp
	Shape   string   // the w binding, as the kernels read it
	// Block and BlockBytes are ggml's block: elements and bytes (1 and 4
	// for F32); a row's columns are a multiple of Block.
	Block, BlockBytes int
	// repack makes the device layout from ggml bytes of rows x cols
	// (whole blocks); nil: the file's bytes as they are.
	repack func(ggml []byte, rows, cols int) ([]byte, error)
}

// Matvec weight types: the suffix of each variant's name.
const (
	MatvecF32  = "f32"
	MatvecF16  = "f16"
	MatvecBF16 = "bf16"
	MatvecQ8_0 = "q8_0"
	MatvecQ4_0 = "q4_0"
	MatvecQ4_1 = "q4_1"
	MatvecQ5_0 = "q5_0"
	MatvecQ5_1 = "q5_1"
	MatvecQ2_K = "q2_k"
	MatvecQ3_K = "q3_k"
	MatvecQ4_K = "q4_k"
	MatvecQ5_K = "q5_k"
	MatvecQ6_K = "q6_k"
)

// WeightTypes is every weight type the GPU kernels read.
var WeightTypes = []WeightType{
	{Name: MatvecF32, GGML: "F32", Defines: []string{"WEIGHT_F32"}, Shape: "[rows][cols] f32", Block: 1, BlockBytes: 4},
	{Name: MatvecF16, GGML: "F16", Defines: []string{"WEIGHT_F16"}, Shape: "[rows][cols] f16", Block: 1, BlockBytes: 2},
	{Name: MatvecBF16, GGML: "BF16", Defines: []string{"WEIGHT_BF16"}, Shape: "[rows][cols] bf16", Block: 1, BlockBytes: 2},
	{Name: MatvecQ8_0, GGML: "Q8_0", Defines: []string{"WEIGHT_Q8_0_SPLIT"}, Block: 32, BlockBytes: 34,
		Shape: "RepackQ8_0: quants [rows][cols] i8, then scales [rows][cols/32] f16", repack: RepackQ8_0},
	{Name: MatvecQ4_0, GGML: "Q4_0", Defines: []string{"WEIGHT_Q4_0_SPLIT"}, Block: 32, BlockBytes: 18,
		Shape: "RepackQ4_0: quants [rows][cols/2] nibble bytes, then scales [rows][cols/32] f16", repack: RepackQ4_0},
	subblockType(MatvecQ4_1, "Q4_1", subblockQ4_1),
	subblockType(MatvecQ5_0, "Q5_0", subblockQ5_0),
	subblockType(MatvecQ5_1, "Q5_1", subblockQ5_1),
	subblockType(MatvecQ2_K, "Q2_K", subblockQ2_K),
	subblockType(MatvecQ3_K, "Q3_K", subblockQ3_K),
	subblockType(MatvecQ4_K, "Q4_K", subblockQ4_K),
	subblockType(MatvecQ5_K, "Q5_K", subblockQ5_K),
	subblockType(MatvecQ6_K, "Q6_K", subblockQ6_K),
}

// MatvecTypes are the weight types' names, in WeightTypes's order.
var MatvecTypes = func() []string {
	var names []string
	for _, wt := range WeightTypes {
		names = append(names, wt.Name)
	}
	return names
}()

// Weight is the weight type named name (a MatvecTypes entry).
func Weight(name string) (WeightType, error) {
	for _, wt := range WeightTypes {
		if wt.Name == name {
			return wt, nil
		}
	}
	return WeightType{}, fmt.Errorf("shaders: no weight type %q", name)
}

// WeightForGGML is the weight type of ggml's type name ("Q4_K"), and
// whether the GPU reads it.
func WeightForGGML(ggml string) (WeightType, bool) {
	for _, wt := range WeightTypes {
		if wt.GGML == ggml {
			return wt, true
		}
	}
	return WeightType{}, false
}

// Matrix is a weight matrix as the device holds it: the one answer the
// engine's upload, its fit check and its batched graph take of shaders for
// each matrix (DeviceMatrix).
type Matrix struct {
	Type       WeightType // its kernels' type; Type.Name is the variants' suffix
	Rows, Cols int
	RowBytes   int    // a row in the device layout, at most (RowBytes)
	Matmul     string // the matmul variant that reads it
	Embed      string // the embedding lookup's, when it is a token table
}

// DeviceMatrix is the device layout of a rows x cols matrix of ggml's type
// ggml ("Q4_K"; "F32" for one decoded at load). The error says why the GPU
// cannot hold it: no kernel reads the type, or the columns are not whole
// blocks.
func DeviceMatrix(ggml string, rows, cols int) (Matrix, error) {
	wt, ok := WeightForGGML(ggml)
	if !ok {
		var names []string
		for _, wt := range WeightTypes {
			names = append(names, wt.GGML)
		}
		return Matrix{}, fmt.Errorf("type %s has no GPU kernel (%s do)", ggml, strings.Join(names, ", "))
	}
	if cols%wt.Block != 0 {
		return Matrix{}, fmt.Errorf("%s with %d columns, not a multiple of its block of %d", ggml, cols, wt.Block)
	}
	rowBytes, err := RowBytes(wt.Name, cols)
	if err != nil {
		return Matrix{}, err
	}
	return Matrix{Type: wt, Rows: rows, Cols: cols, RowBytes: rowBytes, Matmul: MatmulName(wt.Name), Embed: EmbedName(wt.Name)}, nil
}

// Bytes is rows of the matrix, the file's ggml bytes data, in the device
// layout (MatvecBytes).
func (m Matrix) Bytes(data []byte, rows int) ([]byte, error) {
	return MatvecBytes(m.Type.Name, data, rows, m.Cols)
}

// DeviceBytes bounds what the whole matrix takes on the device.
func (m Matrix) DeviceBytes() uint64 { return uint64(m.Rows) * uint64(m.RowBytes) }

// MatmulName is matmul's variant for weight type typ (MatvecTypes).
func MatmulName(typ string) string { return "matmul_" + typ }

// EmbedName is embed's variant that reads weight type typ in its device
// layout (the one matvec and matmul read: a tied output matrix and the
// table are one upload).
func EmbedName(typ string) string {
	if typ == MatvecQ8_0 || typ == MatvecQ4_0 {
		return "embed_" + typ + "_split"
	}
	return "embed_" + typ
}

// RowBytes is an upper bound of the bytes one row of cols takes in typ's
// device layout, such that n rows take at most n*RowBytes(cols) bytes: the
// sub-block layout is bigger than ggml's blocks (a byte of scale and one of
// min a sub-block, unpacked: Q2_K 100 bytes a super-block against 84, Q3_K
// 132 against 110, Q4_K 148 against 144, Q6_K 228 against 210), so a
// matrix bound in pieces sizes them by this, not by the file's bytes.
func RowBytes(typ string, cols int) (int, error) {
	wt, err := Weight(typ)
	if err != nil {
		return 0, err
	}
	f, ok := subblockOf[typ]
	if !ok {
		return cols / wt.Block * wt.BlockBytes, nil
	}
	low, high, scales, supers := subblockPlanes(f, cols)
	return low + high + scales + supers, nil // scales rounded up to 4 bytes: a bound of n rows' share
}

// MatvecBytes is W of type typ (a MatvecTypes entry) as the kernels read
// it, from the file's ggml bytes of rows x cols: F32, F16 and BF16 as they
// are, the quantized types repacked.
func MatvecBytes(typ string, ggml []byte, rows, cols int) ([]byte, error) {
	wt, err := Weight(typ)
	if err != nil {
		return nil, err
	}
	if cols%wt.Block != 0 {
		return nil, fmt.Errorf("shaders: %s rows of %d columns, not a multiple of its block of %d", wt.GGML, cols, wt.Block)
	}
	if want := rows * cols / wt.Block * wt.BlockBytes; len(ggml) != want {
		return nil, fmt.Errorf("shaders: %d bytes of %s for %d x %d, want %d", len(ggml), wt.GGML, rows, cols, want)
	}
	if wt.repack == nil {
		return ggml, nil
	}
	return wt.repack(ggml, rows, cols)
}

// ---- The sub-block layout

// subblockFormat is a type in the sub-block layout: ggml blocks of super
// elements with a scale (and min) per sub-block of sub elements, values of
// bits bits less zero.
type subblockFormat struct {
	bits, sub, super, zero int
	min                    bool // dmin*m is not always 0: the kernels sum x per sub-block
	blockBytes             int
	// unpack reads one ggml block: q [super] (unsigned, < 1<<bits), sc and m
	// [super/sub], d and dmin (half bits).
	unpack func(blk []byte, q []uint8, sc []int8, m []uint8) (d, dmin uint16)
}

// subblockOf is the format of each type in the sub-block layout.
var subblockOf = map[string]subblockFormat{
	MatvecQ4_1: subblockQ4_1, MatvecQ5_0: subblockQ5_0, MatvecQ5_1: subblockQ5_1,
	MatvecQ2_K: subblockQ2_K, MatvecQ3_K: subblockQ3_K, MatvecQ4_K: subblockQ4_K,
	MatvecQ5_K: subblockQ5_K, MatvecQ6_K: subblockQ6_K,
}

func subblockType(name, ggml string, f subblockFormat) WeightType {
	defines := []string{"WEIGHT_SUBBLOCK", fmt.Sprintf("SB_BITS=%d", f.bits), fmt.Sprintf("SB_SUB=%d", f.sub),
		fmt.Sprintf("SB_SUPER=%d", f.super), fmt.Sprintf("SB_ZERO=%d", f.zero)}
	if f.min {
		defines = append(defines, "SB_MIN")
	}
	return WeightType{Name: name, GGML: ggml, Defines: defines, Block: f.super, BlockBytes: f.blockBytes,
		Shape: fmt.Sprintf("RepackSubblock (%d-bit values, scales per %d, super-blocks of %d)", f.bits, f.sub, f.super),
		repack: func(ggml []byte, rows, cols int) ([]byte, error) {
			return RepackSubblock(f, ggml, rows, cols), nil
		}}
}

// subblockPlanes are the bytes of each plane of elems values of format f in
// the sub-block layout (RepackSubblock).
func subblockPlanes(f subblockFormat, elems int) (low, high, scales, supers int) {
	groups := elems / 32
	lowBits := 4
	if f.bits < 4 {
		lowBits = 2
	}
	low = groups * 32 * lowBits / 8
	high = groups * 4 * (f.bits - lowBits)
	scales = (2*(elems/f.sub) + 3) / 4 * 4
	if f.interleaved() {
		high, scales = high+scales, 0
	}
	supers = 4 * (elems / f.super)
	return low, high, scales, supers
}

// interleaved says whether f's high-bit and scale words share one plane,
// [high word, scale word] a group: Q3_K, whose group has one of each (a
// high bit a value, two sub-blocks of 16), so that a CPU device loads a
// pair of groups' four words at once (matvec.comp's rowsPass).
func (f subblockFormat) interleaved() bool { return f.bits == 3 && f.sub == 16 }

// RepackSubblock is ggml data of rows x cols of format f in the sub-block
// layout, four planes one after the other, each indexed by the 32-element
// group g (counted over the whole matrix):
//   - low bits: 4 bits a value (bits >= 4: 16 bytes a group, byte k holding
//     value k in its low nibble and k+16 in its high one) or 2 (8 bytes a
//     group, byte k holding values k, k+8, k+16, k+24 at shifts 0, 2, 4, 6);
//   - high bits: bits-4 (or bits-2) words a group, word h holding bit h of
//     the high part of value 4t+u (quad t, place u) at bit 8u+t, so that
//     word>>t & 0x01010101 is quad t's bits, a byte each;
//   - scales: a u16 a sub-block, sc (int8) in its low byte, m in its high
//     one, padded to 4 bytes; for Q3_K (interleaved) not a plane of its
//     own: its high plane holds two words a group, the high-bit word and
//     then the group's two scales;
//   - super-blocks: a u32 each, d in its low half, dmin in its high one.
//
// The low bits of a quad of values 4j..4j+3 are then one word (shifted and
// masked), its high bits another, and every plane is read in aligned words.
func RepackSubblock(f subblockFormat, ggml []byte, rows, cols int) []byte {
	elems := rows * cols
	low, high, scales, supers := subblockPlanes(f, elems)
	out := make([]byte, low+high+scales+supers)
	lowP, highP, scP, supP := out[:low], out[low:low+high], out[low+high:low+high+scales], out[low+high+scales:]
	hiWords := f.bits - 4 // high-bit words a group
	if f.bits < 4 {
		hiWords = f.bits - 2
	}
	hiStride := hiWords // words a group in the high plane
	if f.interleaved() {
		hiStride = 2
	}
	q := make([]uint8, f.super)
	sc := make([]int8, f.super/f.sub)
	m := make([]uint8, f.super/f.sub)
	le := binary.LittleEndian
	for b := 0; b < elems/f.super; b++ {
		d, dmin := f.unpack(ggml[b*f.blockBytes:(b+1)*f.blockBytes], q, sc, m)
		le.PutUint32(supP[4*b:], uint32(d)|uint32(dmin)<<16)
		for s := range sc {
			i := b*len(sc) + s
			v := uint16(uint8(sc[s])) | uint16(m[s])<<8
			if f.interleaved() { // after the high word of its group
				le.PutUint16(highP[4*(2*(i/2)+1)+2*(i%2):], v)
			} else {
				le.PutUint16(scP[2*i:], v)
			}
		}
		for g := 0; g < f.super/32; g++ {
			gi := b*f.super/32 + g
			vals := q[32*g : 32*g+32]
			lowBits := 4
			if f.bits < 4 {
				lowBits = 2
				for k := 0; k < 8; k++ {
					lowP[8*gi+k] = vals[k]&3 | vals[k+8]&3<<2 | vals[k+16]&3<<4 | vals[k+24]&3<<6
				}
			} else {
				for k := 0; k < 16; k++ {
					lowP[16*gi+k] = vals[k]&15 | vals[k+16]&15<<4
				}
			}
			for h := 0; h < hiWords; h++ {
				var word uint32
				for i, v := range vals {
					word |= uint32(v>>(lowBits+h)&1) << (8*(i%4) + i/4)
				}
				le.PutUint32(highP[4*(gi*hiStride+h):], word)
			}
		}
	}
	return out
}

// halfBits reads a little-endian half.
func halfBits(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }

// The ggml blocks (ggml-common.h), unpacked. The legacy types are one
// sub-block of 32: Q4_1 and Q5_1 are x = d*q + m, which is the layout's
// (d*1)*q - (dmin*1) with dmin = -m (a sign flip, exact); Q5_0 is
// x = d*(q-16).
var (
	subblockQ4_1 = subblockFormat{bits: 4, sub: 32, super: 32, min: true, blockBytes: 20,
		unpack: func(blk []byte, q []uint8, sc []int8, m []uint8) (uint16, uint16) {
			for k := 0; k < 16; k++ {
				q[k], q[k+16] = blk[4+k]&15, blk[4+k]>>4
			}
			sc[0], m[0] = 1, 1
			return halfBits(blk), halfBits(blk[2:]) ^ 0x8000
		}}
	subblockQ5_0 = subblockFormat{bits: 5, sub: 32, super: 32, zero: 16, blockBytes: 22,
		unpack: func(blk []byte, q []uint8, sc []int8, m []uint8) (uint16, uint16) {
			qh := binary.LittleEndian.Uint32(blk[2:])
			for k := 0; k < 16; k++ {
				q[k] = blk[6+k]&15 | uint8(qh>>k&1)<<4
				q[k+16] = blk[6+k]>>4 | uint8(qh>>(k+16)&1)<<4
			}
			sc[0], m[0] = 1, 0
			return halfBits(blk), 0
		}}
	subblockQ5_1 = subblockFormat{bits: 5, sub: 32, super: 32, min: true, blockBytes: 24,
		unpack: func(blk []byte, q []uint8, sc []int8, m []uint8) (uint16, uint16) {
			qh := binary.LittleEndian.Uint32(blk[4:])
			for k := 0; k < 16; k++ {
				q[k] = blk[8+k]&15 | uint8(qh>>k&1)<<4
				q[k+16] = blk[8+k]>>4 | uint8(qh>>(k+16)&1)<<4
			}
			sc[0], m[0] = 1, 1
			return halfBits(blk), halfBits(blk[2:]) ^ 0x8000
		}}
)

// K-quants: super-blocks of 256. The 2-bit fields (Q2_K, Q3_K, and Q6_K's
// high bits) pack each half of 128 values in 32 bytes, byte l holding
// values l, l+32, l+64, l+96 of the half at shifts 0, 2, 4, 6.
func crumbAt(qs []byte, e int) uint8 { return qs[32*(e/128)+e%32] >> (2 * (e % 128 / 32)) & 3 }

// scaleMinK4 is Q4_K's and Q5_K's 6-bit scale and min of sub-block j from
// their 12 bytes: j < 4 in the low 6 bits of bytes j and j+4; j >= 4 low 4
// bits from byte j+4, top 2 from the spare top bits of bytes j-4 and j.
func scaleMinK4(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&15 | s[j-4]>>6<<4, s[j+4]>>4 | s[j]>>6<<4
}

// scalesK4 unpacks Q4_K's and Q5_K's 8 scales and mins.
func scalesK4(s []byte, sc []int8, m []uint8) {
	for j := range sc {
		v, mm := scaleMinK4(j, s)
		sc[j], m[j] = int8(v), mm
	}
}

var (
	// Q2_K (84 B): scales[16] (scale | min<<4), qs[64], d, dmin.
	subblockQ2_K = subblockFormat{bits: 2, sub: 16, super: 256, min: true, blockBytes: 84,
		unpack: func(blk []byte, q []uint8, sc []int8, m []uint8) (uint16, uint16) {
			for e := range q {
				q[e] = crumbAt(blk[16:80], e)
			}
			for j := range sc {
				sc[j], m[j] = int8(blk[j]&15), blk[j]>>4
			}
			return halfBits(blk[80:]), halfBits(blk[82:])
		}}
	// Q3_K (110 B): hmask[32], qs[64], scales[12] (16 6-bit, stored +32), d.
	// ggml's value is the 2 low bits less 4 when the hmask bit is clear: q =
	// low | hbit<<2 less zero 4.
	subblockQ3_K = subblockFormat{bits: 3, sub: 16, super: 256, zero: 4, blockBytes: 110,
		unpack: func(blk []byte, q []uint8, sc []int8, m []uint8) (uint16, uint16) {
			hmask, s := blk[:32], blk[96:108]
			for e := range q {
				q[e] = crumbAt(blk[32:96], e) | (hmask[e%32]>>(e/32)&1)<<2
			}
			for j := range sc {
				lo := s[j%8] >> (4 * (j / 8)) & 15
				hi := s[8+j%4] >> (2 * (j / 4)) & 3
				sc[j], m[j] = int8(lo|hi<<4)-32, 0
			}
			return halfBits(blk[108:]), 0
		}}
	// Q4_K (144 B): d, dmin, scales[12], qs[128]: each 64 values share 32
	// bytes, low nibbles first.
	subblockQ4_K = subblockFormat{bits: 4, sub: 32, super: 256, min: true, blockBytes: 144,
		unpack: func(blk []byte, q []uint8, sc []int8, m []uint8) (uint16, uint16) {
			for e := range q {
				q[e] = blk[16+32*(e/64)+e%32] >> (4 * (e / 32 % 2)) & 15
			}
			scalesK4(blk[4:16], sc, m)
			return halfBits(blk), halfBits(blk[2:])
		}}
	// Q5_K (176 B): d, dmin, scales[12], qh[32] (the fifth bit of value e at
	// bit e/32 of byte e%32), qs[128] as Q4_K's.
	subblockQ5_K = subblockFormat{bits: 5, sub: 32, super: 256, min: true, blockBytes: 176,
		unpack: func(blk []byte, q []uint8, sc []int8, m []uint8) (uint16, uint16) {
			for e := range q {
				q[e] = blk[48+32*(e/64)+e%32]>>(4*(e/32%2))&15 | (blk[16+e%32]>>(e/32)&1)<<4
			}
			scalesK4(blk[4:16], sc, m)
			return halfBits(blk), halfBits(blk[2:])
		}}
	// Q6_K (210 B): ql[128], qh[64], scales[16] int8, d; x = d*sc*(q-32).
	// Per half of 128: ql bytes l and l+32 hold values l, l+32 (low nibbles)
	// and l+64, l+96 (high nibbles); qh byte l their top 2 bits.
	subblockQ6_K = subblockFormat{bits: 6, sub: 16, super: 256, zero: 32, blockBytes: 210,
		unpack: func(blk []byte, q []uint8, sc []int8, m []uint8) (uint16, uint16) {
			for e := range q {
				h, r := e/128, e%128
				lo := blk[64*h+r%64] >> (4 * (r / 64)) & 15
				hi := blk[128+32*h+r%32] >> (2 * (r / 32)) & 3
				q[e] = lo | hi<<4
			}
			for j := range sc {
				sc[j], m[j] = int8(blk[192+j]), 0
			}
			return halfBits(blk[208:]), 0
		}}
)
