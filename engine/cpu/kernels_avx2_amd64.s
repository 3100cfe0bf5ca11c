#include "textflag.h"
#include "kernels_amd64.h"

// The AVX2 kernels of kernels.go (with FMA and F16C), which every amd64
// CPU with AVX2 runs. Go assembler operand order: sources first,
// destination last.
// Signed int8 products without a signed-by-signed multiply: |w| (unsigned)
// times x carrying w's sign, VPMADDUBSW summing pairs into int16 (at most
// 2·128·127, no saturation), VPMADDWD by ones summing pairs into int32.
// Then the block's 8 partial sums are scaled by wd·xd into 8 float lanes.

// func q8DotAVX2(w, x *int8, wd, xd *float32, nb int) float32
TEXT ·q8DotAVX2(SB), NOSPLIT, $0-44
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ wd+16(FP), R8
	MOVQ xd+24(FP), R9
	MOVQ nb+32(FP), CX
	VXORPS Y0, Y0, Y0
	VPCMPEQW Y7, Y7, Y7
	VPSRLW $15, Y7, Y7 // int16 ones

q8loop:
	TESTQ CX, CX
	JZ    q8done
	VMOVDQU (SI), Y1
	VMOVDQU (DI), Y2
	VPSIGNB Y1, Y1, Y3     // |w|
	VPSIGNB Y1, Y2, Y4     // x with w's sign
	VPMADDUBSW Y4, Y3, Y5
	VPMADDWD Y7, Y5, Y5
	VCVTDQ2PS Y5, Y5
	VMOVSS (R8), X6
	VMULSS (R9), X6, X6
	VBROADCASTSS X6, Y6
	VFMADD231PS Y5, Y6, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $4, R8
	ADDQ $4, R9
	DECQ CX
	JMP  q8loop

q8done:
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+40(FP)
	RET

// func q4DotAVX2(w *byte, x *int8, wd, xd *float32, nb int) float32
TEXT ·q4DotAVX2(SB), NOSPLIT, $0-44
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ wd+16(FP), R8
	MOVQ xd+24(FP), R9
	MOVQ nb+32(FP), CX
	VXORPS Y0, Y0, Y0
	VPCMPEQW Y7, Y7, Y7
	VPSRLW $15, Y7, Y7 // int16 ones
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X8
	VPBROADCASTD X8, Y8 // low-nibble mask
	MOVL $0x08080808, AX
	VMOVD AX, X9
	VPBROADCASTD X9, Y9 // the bias, 8

q4loop:
	TESTQ CX, CX
	JZ    q4done
	VMOVDQU (SI), X1
	VPSRLW $4, X1, X2
	VINSERTI128 $1, X2, Y1, Y1 // elements 0-15 low nibbles, 16-31 high
	VPAND Y8, Y1, Y1
	VPSUBB Y9, Y1, Y1          // -8..7
	VMOVDQU (DI), Y2
	VPSIGNB Y1, Y1, Y3
	VPSIGNB Y1, Y2, Y4
	VPMADDUBSW Y4, Y3, Y5
	VPMADDWD Y7, Y5, Y5
	VCVTDQ2PS Y5, Y5
	VMOVSS (R8), X6
	VMULSS (R9), X6, X6
	VBROADCASTSS X6, Y6
	VFMADD231PS Y5, Y6, Y0
	ADDQ $16, SI
	ADDQ $32, DI
	ADDQ $4, R8
	ADDQ $4, R9
	DECQ CX
	JMP  q4loop

q4done:
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+40(FP)
	RET

// func f32DotAVX2(w, x *float32, n int) float32  (n a multiple of 8)
TEXT ·f32DotAVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	VXORPS Y0, Y0, Y0

f32loop:
	TESTQ CX, CX
	JZ    f32done
	VMOVUPS (SI), Y1
	VFMADD231PS (DI), Y1, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JMP  f32loop

f32done:
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func f16DotAVX2(w *uint16, x *float32, n int) float32  (n a multiple of 8)
TEXT ·f16DotAVX2(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	VXORPS Y0, Y0, Y0

f16loop:
	TESTQ CX, CX
	JZ    f16done
	VCVTPH2PS (SI), Y1
	VFMADD231PS (DI), Y1, Y0
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JMP  f16loop

f16done:
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// One block of one row for q8x4AVX2: Y2 holds the activations, Y7 int16
// ones; w at off(SI)(row stride R10), its scale at off(R8)(R11); X12 the
// activations' scale. Adds into acc.
#define Q8ROW(wq, ws, acc) \
	VMOVDQU wq, Y1; \
	VPSIGNB Y1, Y1, Y3; \
	VPSIGNB Y1, Y2, Y4; \
	VPMADDUBSW Y4, Y3, Y5; \
	VPMADDWD Y7, Y5, Y5; \
	VCVTDQ2PS Y5, Y5; \
	VMULSS ws, X12, X6; \
	VBROADCASTSS X6, Y6; \
	VFMADD231PS Y5, Y6, acc

// func q8x4AVX2(w *int8, wstride int, wd *float32, dstride int, x *int8, xd *float32, nb int, out *float32)
// Four weight rows (w, w+wstride, ...; scales wd, wd+dstride floats, ...)
// dotted with one row of activations: out[0..3].
TEXT ·q8x4AVX2(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), R10
	MOVQ wd+16(FP), R8
	MOVQ dstride+24(FP), R11
	SHLQ $2, R11
	MOVQ x+32(FP), DI
	MOVQ xd+40(FP), R9
	MOVQ nb+48(FP), CX
	LEAQ (R10)(R10*2), R12 // 3 strides
	LEAQ (R11)(R11*2), R13
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VPCMPEQW Y7, Y7, Y7
	VPSRLW $15, Y7, Y7

q8x4loop:
	TESTQ CX, CX
	JZ    q8x4done
	VMOVDQU (DI), Y2
	VMOVSS (R9), X12
	Q8ROW((SI), (R8), Y8)
	Q8ROW((SI)(R10*1), (R8)(R11*1), Y9)
	Q8ROW((SI)(R10*2), (R8)(R11*2), Y10)
	Q8ROW((SI)(R12*1), (R8)(R13*1), Y11)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $4, R8
	ADDQ $4, R9
	DECQ CX
	JMP  q8x4loop

q8x4done:
	MOVQ out+56(FP), AX
	SUM4(Y8, Y9, Y10, Y11, X8, X1, (AX))
	VZEROUPPER
	RET

// func f32ScoresAVX2(q, k *float32, stride, m, hd int, scale float32, out *float32)
// out[e] = scale · q[0:hd]·k[e·stride : e·stride+hd] for e < m; hd a
// multiple of 8, stride in floats. Four keys at a time (DI, R8, R9, R13),
// each with its own accumulator, so their FMA chains overlap and one
// reduction serves four; the last 1-3 keys run the same code with the
// missing keys' pointers on the last key, storing only their own. A key's
// sum is the same in either (its lanes reduce alone, in one order).
TEXT ·f32ScoresAVX2(SB), NOSPLIT, $0-56
	MOVQ q+0(FP), SI
	MOVQ k+8(FP), DI
	MOVQ stride+16(FP), R10
	SHLQ $2, R10
	MOVQ m+24(FP), CX
	MOVQ hd+32(FP), R11
	SHRQ $3, R11
	VBROADCASTSS scale+40(FP), X13
	MOVQ out+48(FP), AX

scoreQuad:
	TESTQ CX, CX
	JZ    scoreDone
	// The group's keys: DI, R8, R9, R13, each clamped to the last key.
	MOVQ DI, R8
	MOVQ DI, R9
	MOVQ DI, R13
	CMPQ CX, $2
	JLT  scoreKeys
	ADDQ R10, R8
	MOVQ R8, R9
	MOVQ R8, R13
	CMPQ CX, $3
	JLT  scoreKeys
	ADDQ R10, R9
	MOVQ R9, R13
	CMPQ CX, $4
	JLT  scoreKeys
	ADDQ R10, R13

scoreKeys:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ   R11, DX
	XORQ   BX, BX

scoreLoop:
	VMOVUPS (SI)(BX*1), Y4
	VFMADD231PS (DI)(BX*1), Y4, Y0
	VFMADD231PS (R8)(BX*1), Y4, Y1
	VFMADD231PS (R9)(BX*1), Y4, Y2
	VFMADD231PS (R13)(BX*1), Y4, Y3
	ADDQ $32, BX
	DECQ DX
	JNZ  scoreLoop
	// [key0 0-7], [key1 0-7], ... to X0 = [key0, key1, key2, key3]
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMULPS X13, X0, X0
	CMPQ CX, $4
	JLT  scoreTail
	VMOVUPS X0, (AX)
	ADDQ $16, AX
	LEAQ (DI)(R10*4), DI
	SUBQ $4, CX
	JMP  scoreQuad

scoreTail:
	VMOVSS X0, (AX)
	CMPQ CX, $2
	JLT  scoreDone
	VEXTRACTPS $1, X0, 4(AX)
	CMPQ CX, $3
	JLT  scoreDone
	VEXTRACTPS $2, X0, 8(AX)

scoreDone:
	VZEROUPPER
	RET

// func f32MixAVX2(out, v *float32, stride, m, hd int, p *float32)
// out[0:hd] = Σ_e p[e]·v[e·stride : e·stride+hd] for e < m; hd a
// multiple of 8. The output is walked in pieces of 4, 2, then 1 vectors,
// each summed over every key in registers: even keys and odd keys in two
// sums added at the end (so every vector has two FMA chains), which is
// the same arithmetic whatever piece a vector falls in.
TEXT ·f32MixAVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), SI
	MOVQ stride+16(FP), R10
	SHLQ $2, R10
	MOVQ hd+32(FP), R11
	SHLQ $2, R11 // hd in bytes
	XORQ R8, R8  // the piece's offset in bytes

mixPiece:
	MOVQ R11, R12
	SUBQ R8, R12
	JZ   mixDone
	MOVQ v+8(FP), DI
	ADDQ R8, DI
	MOVQ p+40(FP), AX
	MOVQ m+24(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	CMPQ R12, $128
	JGE  mix4
	CMPQ R12, $64
	JGE  mix2

mix1:
	CMPQ CX, $2
	JLT  mix1last
	VBROADCASTSS (AX), Y8
	VBROADCASTSS 4(AX), Y9
	VFMADD231PS (DI), Y8, Y0
	VFMADD231PS (DI)(R10*1), Y9, Y4
	LEAQ (DI)(R10*2), DI
	ADDQ $8, AX
	SUBQ $2, CX
	JMP  mix1

mix1last:
	TESTQ CX, CX
	JZ    mix1store
	VBROADCASTSS (AX), Y8
	VFMADD231PS (DI), Y8, Y0

mix1store:
	VADDPS Y4, Y0, Y0
	VMOVUPS Y0, (SI)(R8*1)
	ADDQ $32, R8
	JMP  mixPiece

mix2:
	CMPQ CX, $2
	JLT  mix2last
	VBROADCASTSS (AX), Y8
	VBROADCASTSS 4(AX), Y9
	VFMADD231PS (DI), Y8, Y0
	VFMADD231PS 32(DI), Y8, Y1
	VFMADD231PS (DI)(R10*1), Y9, Y4
	VFMADD231PS 32(DI)(R10*1), Y9, Y5
	LEAQ (DI)(R10*2), DI
	ADDQ $8, AX
	SUBQ $2, CX
	JMP  mix2

mix2last:
	TESTQ CX, CX
	JZ    mix2store
	VBROADCASTSS (AX), Y8
	VFMADD231PS (DI), Y8, Y0
	VFMADD231PS 32(DI), Y8, Y1

mix2store:
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VMOVUPS Y0, (SI)(R8*1)
	VMOVUPS Y1, 32(SI)(R8*1)
	ADDQ $64, R8
	JMP  mixPiece

mix4:
	CMPQ CX, $2
	JLT  mix4last
	VBROADCASTSS (AX), Y8
	VBROADCASTSS 4(AX), Y9
	VFMADD231PS (DI), Y8, Y0
	VFMADD231PS 32(DI), Y8, Y1
	VFMADD231PS 64(DI), Y8, Y2
	VFMADD231PS 96(DI), Y8, Y3
	VFMADD231PS (DI)(R10*1), Y9, Y4
	VFMADD231PS 32(DI)(R10*1), Y9, Y5
	VFMADD231PS 64(DI)(R10*1), Y9, Y6
	VFMADD231PS 96(DI)(R10*1), Y9, Y7
	LEAQ (DI)(R10*2), DI
	ADDQ $8, AX
	SUBQ $2, CX
	JMP  mix4

mix4last:
	TESTQ CX, CX
	JZ    mix4store
	VBROADCASTSS (AX), Y8
	VFMADD231PS (DI), Y8, Y0
	VFMADD231PS 32(DI), Y8, Y1
	VFMADD231PS 64(DI), Y8, Y2
	VFMADD231PS 96(DI), Y8, Y3

mix4store:
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	VMOVUPS Y0, (SI)(R8*1)
	VMOVUPS Y1, 32(SI)(R8*1)
	VMOVUPS Y2, 64(SI)(R8*1)
	VMOVUPS Y3, 96(SI)(R8*1)
	ADDQ $128, R8
	JMP  mixPiece

mixDone:
	VZEROUPPER
	RET

// func f16ToF32AVX2(dst *float32, src *uint16, n int)  (n a multiple of 8)
TEXT ·f16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX

cvtLoop:
	TESTQ CX, CX
	JZ    cvtDone
	VCVTPH2PS (SI), Y1
	VMOVUPS Y1, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JMP  cvtLoop

cvtDone:
	VZEROUPPER
	RET

// One block of one Q4_0 row for q4x4AVX2: 16 bytes at wq unpacked to 32
// values -8..7 (Y8 the nibble mask, Y9 the bias), then as Q8ROW.
#define Q4ROW(wq, ws, acc) \
	VMOVDQU wq, X1; \
	VPSRLW $4, X1, X3; \
	VINSERTI128 $1, X3, Y1, Y1; \
	VPAND Y8, Y1, Y1; \
	VPSUBB Y9, Y1, Y1; \
	VPSIGNB Y1, Y1, Y3; \
	VPSIGNB Y1, Y2, Y4; \
	VPMADDUBSW Y4, Y3, Y5; \
	VPMADDWD Y7, Y5, Y5; \
	VCVTDQ2PS Y5, Y5; \
	VMULSS ws, X12, X6; \
	VBROADCASTSS X6, Y6; \
	VFMADD231PS Y5, Y6, acc

// func q4x4AVX2(w *byte, wstride int, wd *float32, dstride int, x *int8, xd *float32, nb int, out *float32)
// q8x4AVX2 for Q4_0 rows (wstride in bytes: cols/2).
TEXT ·q4x4AVX2(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), R10
	MOVQ wd+16(FP), R8
	MOVQ dstride+24(FP), R11
	SHLQ $2, R11
	MOVQ x+32(FP), DI
	MOVQ xd+40(FP), R9
	MOVQ nb+48(FP), CX
	LEAQ (R10)(R10*2), R12
	LEAQ (R11)(R11*2), R13
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15
	VPCMPEQW Y7, Y7, Y7
	VPSRLW $15, Y7, Y7
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X8
	VPBROADCASTD X8, Y8
	MOVL $0x08080808, AX
	VMOVD AX, X9
	VPBROADCASTD X9, Y9

q4x4loop:
	TESTQ CX, CX
	JZ    q4x4done
	VMOVDQU (DI), Y2
	VMOVSS (R9), X12
	Q4ROW((SI), (R8), Y10)
	Q4ROW((SI)(R10*1), (R8)(R11*1), Y11)
	Q4ROW((SI)(R10*2), (R8)(R11*2), Y14)
	Q4ROW((SI)(R12*1), (R8)(R13*1), Y15)
	ADDQ $16, SI
	ADDQ $32, DI
	ADDQ $4, R8
	ADDQ $4, R9
	DECQ CX
	JMP  q4x4loop

q4x4done:
	MOVQ out+56(FP), AX
	SUM4(Y10, Y11, Y14, Y15, X10, X1, (AX))
	VZEROUPPER
	RET

// The order of the dwords after VPACKSSDW and VPACKSSWB, which pack within
// 128-bit lanes: back to element order.
DATA packOrder<>+0(SB)/4, $0
DATA packOrder<>+4(SB)/4, $4
DATA packOrder<>+8(SB)/4, $1
DATA packOrder<>+12(SB)/4, $5
DATA packOrder<>+16(SB)/4, $2
DATA packOrder<>+20(SB)/4, $6
DATA packOrder<>+24(SB)/4, $3
DATA packOrder<>+28(SB)/4, $7
GLOBL packOrder<>(SB), RODATA|NOPTR, $32

// func quantizeAVX2(q *int8, d *float32, x *float32, nb int)
// quantizeRow: per block of 32, d = max|x|/127, q = x·(127/max|x|)
// rounded to nearest even (VCVTPS2DQ), 0 for a block of zeros; d = NaN
// and q = -128 for a block holding a NaN or an infinity.
TEXT ·quantizeAVX2(SB), NOSPLIT, $0-32
	MOVQ q+0(FP), DI
	MOVQ d+8(FP), R8
	MOVQ x+16(FP), SI
	MOVQ nb+24(FP), CX
	MOVL $0x7fffffff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15 // |x| mask
	MOVL $0x42fe0000, AX  // 127.0
	VMOVD AX, X14
	VMOVDQU packOrder<>(SB), Y13

quantLoop:
	TESTQ CX, CX
	JZ    quantDone
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VANDPS Y15, Y0, Y4    // |x| as bits: for |x| the integer order is the
	VANDPS Y15, Y1, Y5    // float order, and a NaN (> 0x7f800000) tops +Inf:
	VPMAXSD Y5, Y4, Y4    // an integer max keeps it, where MAXPS returns its
	VANDPS Y15, Y2, Y5    // second operand when either is NaN
	VPMAXSD Y5, Y4, Y4
	VANDPS Y15, Y3, Y5
	VPMAXSD Y5, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VPMAXSD X5, X4, X4
	VMOVHLPS X4, X4, X5
	VPMAXSD X5, X4, X4
	VPSHUFD $1, X4, X5
	VPMAXSD X5, X4, X4    // amax: NaN if any is, else +Inf if any is
	VSUBSS X4, X4, X5     // 0, or NaN for a NaN or +Inf amax
	VADDSS X5, X4, X4     // NaN for a block that is not finite: d NaN, q -128
	VDIVSS X14, X4, X5
	VMOVSS X5, (R8)       // d = amax/127
	VXORPS X6, X6, X6
	VCMPSS $4, X6, X4, X7 // amax != 0
	VDIVSS X4, X14, X6    // 127/amax
	VANDPS X7, X6, X6     // 0 for a block of zeros
	VBROADCASTSS X6, Y6
	VMULPS Y6, Y0, Y0
	VMULPS Y6, Y1, Y1
	VMULPS Y6, Y2, Y2
	VMULPS Y6, Y3, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y13, Y0
	VMOVDQU Y0, (DI)
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $4, R8
	DECQ CX
	JMP  quantLoop

quantDone:
	VZEROUPPER
	RET

#define BCAST(bits, reg) MOVL $bits, AX; VMOVD AX, X0; VBROADCASTSS X0, reg

// EXP_CONSTS loads expf's constants for EXP8 into Y5-Y14 (clobbers AX and
// X0): Y14 -87, Y13 log2e, Y12 1/2, Y11 and Y10 ln2 in a high and a low
// part, Y9-Y6 1/720, 1/120, 1/24 and 1/6, Y5 1.
#define EXP_CONSTS \
	BCAST(0xc2ae0000, Y14); \
	BCAST(0x3fb8aa3b, Y13); \
	BCAST(0x3f000000, Y12); \
	BCAST(0x3f317200, Y11); \
	BCAST(0x35bfbe8e, Y10); \
	BCAST(0x3ab60b61, Y9); \
	BCAST(0x3c088889, Y8); \
	BCAST(0x3d2aaaab, Y7); \
	BCAST(0x3e2aaaab, Y6); \
	BCAST(0x3f800000, Y5)

// EXP8 sets Y2 = e^Y0 in 8 lanes as expf computes it (x = k·ln2 + r,
// k = floor(x·log2e + 1/2), e^r by its Taylor polynomial to r^6, 2^k
// added to the exponent bits, 0 below -87), with FMA for the products;
// Y0 must be a number at most 88. Clobbers Y0, Y1, Y3. In turn: Y3 marks
// the lanes below -87 (and -Inf), which end as 0; x is raised to -87
// there to keep the arithmetic in range; Y1 = k = floor(x·log2e + 1/2);
// Y0 = r = x - k·ln2hi - k·ln2lo; Y2 = p by Horner's rule from 1/720
// down to 1; k, exact as an integer, shifted into the exponent and added.
#define EXP8 \
	VCMPPS  $1, Y14, Y0, Y3; \
	VMAXPS  Y14, Y0, Y0; \
	VMOVAPS Y12, Y1; \
	VFMADD231PS Y13, Y0, Y1; \
	VROUNDPS $1, Y1, Y1; \
	VFNMADD231PS Y11, Y1, Y0; \
	VFNMADD231PS Y10, Y1, Y0; \
	VMOVAPS Y9, Y2; \
	VFMADD213PS Y8, Y0, Y2; \
	VFMADD213PS Y7, Y0, Y2; \
	VFMADD213PS Y6, Y0, Y2; \
	VFMADD213PS Y12, Y0, Y2; \
	VFMADD213PS Y5, Y0, Y2; \
	VFMADD213PS Y5, Y0, Y2; \
	VCVTTPS2DQ Y1, Y1; \
	VPSLLD  $23, Y1, Y1; \
	VPADDD  Y1, Y2, Y2; \
	VANDNPS Y2, Y3, Y2

// func expSumAVX2(x *float32, n int, mx float32) float32
// x[i] = e^(x[i]-mx) for i < n (n a multiple of 8; x[i]-mx <= 0), as
// expf computes it (EXP8); returns the sum of the new x[i].
TEXT ·expSumAVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	SHRQ $3, CX
	VBROADCASTSS mx+16(FP), Y15
	EXP_CONSTS
	VXORPS Y4, Y4, Y4 // the sum

expLoop:
	TESTQ CX, CX
	JZ    expDone
	VMOVUPS (SI), Y0
	VSUBPS  Y15, Y0, Y0 // x - mx
	EXP8
	VMOVUPS Y2, (SI)
	VADDPS  Y2, Y4, Y4
	ADDQ $32, SI
	DECQ CX
	JMP  expLoop

expDone:
	VEXTRACTF128 $1, Y4, X1
	VADDPS X1, X4, X4
	VHADDPS X4, X4, X4
	VHADDPS X4, X4, X4
	MOVSS X4, ret+24(FP)
	VZEROUPPER
	RET

// func swigluAVX2(gate, up *float32, n int)
// gate[i] = silu(gate[i])·up[i] = gate[i]/(1 + e^-gate[i])·up[i] for
// i < n (a multiple of 8), e^ as EXP8 with its argument capped at 88 (a
// gate below -88 gives about -1e-37·up where silu gives -0); a NaN gate
// stays NaN.
TEXT ·swigluAVX2(SB), NOSPLIT, $0-24
	MOVQ gate+0(FP), SI
	MOVQ up+8(FP), DI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	EXP_CONSTS
	BCAST(0x42b00000, Y4) // 88

swigluLoop:
	TESTQ CX, CX
	JZ    swigluDone
	VMOVUPS (SI), Y15
	VXORPS  Y0, Y0, Y0
	VSUBPS  Y15, Y0, Y0 // -g
	VMINPS  Y4, Y0, Y0  // at most 88 (NaN: 88, and g keeps the NaN)
	EXP8
	VADDPS  Y5, Y2, Y2  // 1 + e^-g
	VDIVPS  Y2, Y15, Y2 // g / (1 + e^-g)
	VMULPS  (DI), Y2, Y2
	VMOVUPS Y2, (SI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JMP  swigluLoop

swigluDone:
	VZEROUPPER
	RET

#define HSUM(y, x, off) VEXTRACTF128 $1, y, X12; VADDPS X12, x, x; VHADDPS x, x, x; VHADDPS x, x, x; MOVSS x, off(AX)

// func f32x3x4AVX2(w *float32, wstride int, x *float32, xstride, n int, out *float32)
// out[3t+r] = w[r·wstride : r·wstride+n] · x[t·xstride : t·xstride+n] for
// three weight rows r and four activation rows t: each weight load serves
// four products and each activation load three. n a multiple of 8, strides
// in floats.
TEXT ·f32x3x4AVX2(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), R8
	SHLQ $2, R8
	MOVQ x+16(FP), DI
	MOVQ xstride+24(FP), R9
	SHLQ $2, R9
	MOVQ n+32(FP), CX
	SHRQ $3, CX
	MOVQ out+40(FP), AX
	LEAQ (SI)(R8*1), R10
	LEAQ (R10)(R8*1), R11
	LEAQ (DI)(R9*1), R12
	LEAQ (R12)(R9*1), R13
	LEAQ (R13)(R9*1), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	XORQ BX, BX

f3x4Loop:
	VMOVUPS (SI)(BX*1), Y12
	VMOVUPS (R10)(BX*1), Y13
	VMOVUPS (R11)(BX*1), Y14
	VMOVUPS (DI)(BX*1), Y15
	VFMADD231PS Y15, Y12, Y0
	VFMADD231PS Y15, Y13, Y1
	VFMADD231PS Y15, Y14, Y2
	VMOVUPS (R12)(BX*1), Y15
	VFMADD231PS Y15, Y12, Y3
	VFMADD231PS Y15, Y13, Y4
	VFMADD231PS Y15, Y14, Y5
	VMOVUPS (R13)(BX*1), Y15
	VFMADD231PS Y15, Y12, Y6
	VFMADD231PS Y15, Y13, Y7
	VFMADD231PS Y15, Y14, Y8
	VMOVUPS (DX)(BX*1), Y15
	VFMADD231PS Y15, Y12, Y9
	VFMADD231PS Y15, Y13, Y10
	VFMADD231PS Y15, Y14, Y11
	ADDQ $32, BX
	DECQ CX
	JNZ  f3x4Loop

	HSUM(Y0, X0, 0)
	HSUM(Y1, X1, 4)
	HSUM(Y2, X2, 8)
	HSUM(Y3, X3, 12)
	HSUM(Y4, X4, 16)
	HSUM(Y5, X5, 20)
	HSUM(Y6, X6, 24)
	HSUM(Y7, X7, 28)
	HSUM(Y8, X8, 32)
	HSUM(Y9, X9, 36)
	HSUM(Y10, X10, 40)
	HSUM(Y11, X11, 44)
	VZEROUPPER
	RET
