#include "textflag.h"

// The amd64 kernels of kernels.go (AVX2, FMA, F16C). Go assembler operand
// order: sources first, destination last.

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv0() (eax, edx uint32)
TEXT ·xgetbv0(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET

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
	MOVD AX, X8
	VPBROADCASTD X8, Y8 // low-nibble mask
	MOVL $0x08080808, AX
	MOVD AX, X9
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
	// Four horizontal sums at once: pairs, then quads, then halves.
	VHADDPS Y9, Y8, Y8    // [a01 a23 b01 b23 | a45 a67 b45 b67]
	VHADDPS Y11, Y10, Y10 // the same for c, d
	VHADDPS Y10, Y8, Y8   // [a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7]
	VEXTRACTF128 $1, Y8, X1
	VADDPS X1, X8, X8
	MOVQ out+56(FP), AX
	VMOVUPS X8, (AX)
	VZEROUPPER
	RET

// func f32ScoresAVX2(q, k *float32, stride, m, hd int, scale float32, out *float32)
// out[e] = scale · q[0:hd]·k[e·stride : e·stride+hd] for e < m; hd a
// multiple of 8, stride in floats.
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

scoreEntry:
	TESTQ CX, CX
	JZ    scoreDone
	VXORPS Y0, Y0, Y0
	MOVQ  R11, DX
	XORQ  BX, BX

scoreLoop:
	VMOVUPS (SI)(BX*1), Y1
	VFMADD231PS (DI)(BX*1), Y1, Y0
	ADDQ $32, BX
	DECQ DX
	JNZ  scoreLoop
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMULSS X13, X0, X0
	MOVSS X0, (AX)
	ADDQ $4, AX
	ADDQ R10, DI
	DECQ CX
	JMP  scoreEntry

scoreDone:
	VZEROUPPER
	RET

// func f32MixAVX2(out, v *float32, stride, m, hd int, p *float32)
// out[0:hd] = Σ_e p[e]·v[e·stride : e·stride+hd] for e < m; hd a
// multiple of 8.
TEXT ·f32MixAVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ stride+16(FP), R10
	SHLQ $2, R10
	MOVQ m+24(FP), CX
	MOVQ hd+32(FP), R11
	SHRQ $3, R11
	MOVQ p+40(FP), AX
	// clear out
	VXORPS Y0, Y0, Y0
	MOVQ R11, DX
	XORQ BX, BX

mixClear:
	VMOVUPS Y0, (SI)(BX*1)
	ADDQ $32, BX
	DECQ DX
	JNZ  mixClear

mixEntry:
	TESTQ CX, CX
	JZ    mixDone
	VBROADCASTSS (AX), Y2
	MOVQ R11, DX
	XORQ BX, BX

mixLoop:
	VMOVUPS (SI)(BX*1), Y1
	VFMADD231PS (DI)(BX*1), Y2, Y1
	VMOVUPS Y1, (SI)(BX*1)
	ADDQ $32, BX
	DECQ DX
	JNZ  mixLoop
	ADDQ $4, AX
	ADDQ R10, DI
	DECQ CX
	JMP  mixEntry

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
	MOVD AX, X8
	VPBROADCASTD X8, Y8
	MOVL $0x08080808, AX
	MOVD AX, X9
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
	VHADDPS Y11, Y10, Y10
	VHADDPS Y15, Y14, Y14
	VHADDPS Y14, Y10, Y10
	VEXTRACTF128 $1, Y10, X1
	VADDPS X1, X10, X10
	MOVQ out+56(FP), AX
	VMOVUPS X10, (AX)
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
	MOVD AX, X15
	VPBROADCASTD X15, Y15 // |x| mask
	MOVL $0x42fe0000, AX  // 127.0
	MOVD AX, X14
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

// ---- AVX-512 VNNI (with BW and VL): q8x4VNNI

// Lane i of the two-block scale vector takes scale i/8: [0 x8, 1 x8].
DATA pairScales<>+0(SB)/8, $0
DATA pairScales<>+8(SB)/8, $0
DATA pairScales<>+16(SB)/8, $0
DATA pairScales<>+24(SB)/8, $0
DATA pairScales<>+32(SB)/8, $0x0000000100000001
DATA pairScales<>+40(SB)/8, $0x0000000100000001
DATA pairScales<>+48(SB)/8, $0x0000000100000001
DATA pairScales<>+56(SB)/8, $0x0000000100000001
GLOBL pairScales<>(SB), RODATA|NOPTR, $64

// Two blocks (64 values) of one row for q8x4VNNI, the row's quants in Z1
// and its two scales in X6: Z2 holds the activations, X12 their two
// scales, Z0 zero, Z13 pairScales. As VPSIGNB (which has no 512-bit form):
// |w| unsigned, times x negated where w is negative (a masked subtraction
// from zero); VPDPBUSD sums each 4 products into an int32 lane at once, no
// int16 step; lanes 0-7 are the first block's, 8-15 the second's.
#define Q8PAIR(acc) \
	VPMOVB2M Z1, K1; \
	VPABSB Z1, Z3; \
	VMOVDQA64 Z2, Z4; \
	VPSUBB Z2, Z0, K1, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPDPBUSD Z4, Z3, Z5; \
	VCVTDQ2PS Z5, Z5; \
	VMULPS X12, X6, X6; \
	VPERMPS Z6, Z13, Z6; \
	VFMADD231PS Z5, Z6, acc

// func q8x4VNNI(w *int8, wstride int, wd *float32, dstride int, x *int8, xd *float32, nb int, out *float32)
// q8x4AVX2 two blocks at a time; an odd last block is loaded masked to 32
// bytes (the rest zero) with one scale (the other 0), so nothing past the
// rows is read.
TEXT ·q8x4VNNI(SB), NOSPLIT, $0-64
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
	VPXORD Z0, Z0, Z0
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VMOVDQU32 pairScales<>(SB), Z13
	MOVQ $0xffffffff, AX
	KMOVQ AX, K2

vnniloop:
	CMPQ CX, $2
	JLT  vnnitail
	VMOVDQU64 (DI), Z2
	VMOVQ (R9), X12
	VMOVDQU64 (SI), Z1
	VMOVQ (R8), X6
	Q8PAIR(Z8)
	VMOVDQU64 (SI)(R10*1), Z1
	VMOVQ (R8)(R11*1), X6
	Q8PAIR(Z9)
	VMOVDQU64 (SI)(R10*2), Z1
	VMOVQ (R8)(R11*2), X6
	Q8PAIR(Z10)
	VMOVDQU64 (SI)(R12*1), Z1
	VMOVQ (R8)(R13*1), X6
	Q8PAIR(Z11)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $8, R8
	ADDQ $8, R9
	SUBQ $2, CX
	JMP  vnniloop

vnnitail:
	TESTQ CX, CX
	JZ    vnnidone
	VMOVDQU8.Z (DI), K2, Z2
	VMOVSS (R9), X12
	VMOVDQU8.Z (SI), K2, Z1
	VMOVSS (R8), X6
	Q8PAIR(Z8)
	VMOVDQU8.Z (SI)(R10*1), K2, Z1
	VMOVSS (R8)(R11*1), X6
	Q8PAIR(Z9)
	VMOVDQU8.Z (SI)(R10*2), K2, Z1
	VMOVSS (R8)(R11*2), X6
	Q8PAIR(Z10)
	VMOVDQU8.Z (SI)(R12*1), K2, Z1
	VMOVSS (R8)(R13*1), X6
	Q8PAIR(Z11)

vnnidone:
	// Each accumulator's halves added, then q8x4AVX2's four sums.
	VEXTRACTF64X4 $1, Z8, Y1
	VADDPS Y1, Y8, Y8
	VEXTRACTF64X4 $1, Z9, Y1
	VADDPS Y1, Y9, Y9
	VEXTRACTF64X4 $1, Z10, Y1
	VADDPS Y1, Y10, Y10
	VEXTRACTF64X4 $1, Z11, Y1
	VADDPS Y1, Y11, Y11
	VHADDPS Y9, Y8, Y8
	VHADDPS Y11, Y10, Y10
	VHADDPS Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X1
	VADDPS X1, X8, X8
	MOVQ out+56(FP), AX
	VMOVUPS X8, (AX)
	VZEROUPPER
	RET

// ---- AVX-512 VNNI: q4x4VNNI

// Q4_0's two-block lanes (see q4x4VNNI): 128-bit lanes 0 and 2 are the
// first block's, 1 and 3 the second's.
DATA q4PairScales<>+0(SB)/8, $0
DATA q4PairScales<>+8(SB)/8, $0
DATA q4PairScales<>+16(SB)/8, $0x0000000100000001
DATA q4PairScales<>+24(SB)/8, $0x0000000100000001
DATA q4PairScales<>+32(SB)/8, $0
DATA q4PairScales<>+40(SB)/8, $0
DATA q4PairScales<>+48(SB)/8, $0x0000000100000001
DATA q4PairScales<>+56(SB)/8, $0x0000000100000001
GLOBL q4PairScales<>(SB), RODATA|NOPTR, $64

// Two Q4_0 blocks of one row for q4x4VNNI, their 32 bytes in Y1 (first
// block's 16, then the second's) and their scales in X6: the low nibbles
// (values 0-15 of each block) fill 128-bit lanes 0 and 1, the high ones
// (values 16-31) lanes 2 and 3, matching Z2's activations. The nibbles are
// unsigned 0..15, so VPDPBUSD takes them as they are; their bias of 8 is
// Z14, 8·(the sum of each lane's 4 activations), subtracted per lane.
#define Q4PAIR(acc) \
	VPSRLW $4, Y1, Y3; \
	VINSERTI64X4 $1, Y3, Z1, Z1; \
	VPANDD Z16, Z1, Z1; \
	VPXORD Z5, Z5, Z5; \
	VPDPBUSD Z2, Z1, Z5; \
	VPSUBD Z14, Z5, Z5; \
	VCVTDQ2PS Z5, Z5; \
	VMULPS X12, X6, X6; \
	VPERMPS Z6, Z13, Z6; \
	VFMADD231PS Z5, Z6, acc

// func q4x4VNNI(w *byte, wstride int, wd *float32, dstride int, x *int8, xd *float32, nb int, out *float32)
// q4x4AVX2 two blocks at a time (an odd last block as q8x4VNNI's: the
// activations loaded masked, 16 bytes of weights, one scale). Each pair's
// activations are reordered once for the four rows: [values 0-15 of block
// b, of b+1, values 16-31 of b, of b+1].
TEXT ·q4x4VNNI(SB), NOSPLIT, $0-64
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
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VMOVDQU32 q4PairScales<>(SB), Z13
	MOVL $0x01010101, AX
	VPBROADCASTD AX, Z15
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z16
	MOVQ $0xffffffff, AX
	KMOVQ AX, K2

q4vloop:
	CMPQ CX, $2
	JLT  q4vtail
	VMOVDQU64 (DI), Z2
	VMOVQ (R9), X12
	VSHUFI64X2 $0xd8, Z2, Z2, Z2
	VPXORD Z14, Z14, Z14
	VPDPBUSD Z2, Z15, Z14
	VPSLLD $3, Z14, Z14
	VMOVDQU (SI), Y1
	VMOVQ (R8), X6
	Q4PAIR(Z8)
	VMOVDQU (SI)(R10*1), Y1
	VMOVQ (R8)(R11*1), X6
	Q4PAIR(Z9)
	VMOVDQU (SI)(R10*2), Y1
	VMOVQ (R8)(R11*2), X6
	Q4PAIR(Z10)
	VMOVDQU (SI)(R12*1), Y1
	VMOVQ (R8)(R13*1), X6
	Q4PAIR(Z11)
	ADDQ $32, SI
	ADDQ $64, DI
	ADDQ $8, R8
	ADDQ $8, R9
	SUBQ $2, CX
	JMP  q4vloop

q4vtail:
	TESTQ CX, CX
	JZ    q4vdone
	VMOVDQU8.Z (DI), K2, Z2
	VMOVSS (R9), X12
	VSHUFI64X2 $0xd8, Z2, Z2, Z2
	VPXORD Z14, Z14, Z14
	VPDPBUSD Z2, Z15, Z14
	VPSLLD $3, Z14, Z14
	VMOVDQU (SI), X1
	VMOVSS (R8), X6
	Q4PAIR(Z8)
	VMOVDQU (SI)(R10*1), X1
	VMOVSS (R8)(R11*1), X6
	Q4PAIR(Z9)
	VMOVDQU (SI)(R10*2), X1
	VMOVSS (R8)(R11*2), X6
	Q4PAIR(Z10)
	VMOVDQU (SI)(R12*1), X1
	VMOVSS (R8)(R13*1), X6
	Q4PAIR(Z11)

q4vdone:
	VEXTRACTF64X4 $1, Z8, Y1
	VADDPS Y1, Y8, Y8
	VEXTRACTF64X4 $1, Z9, Y1
	VADDPS Y1, Y9, Y9
	VEXTRACTF64X4 $1, Z10, Y1
	VADDPS Y1, Y10, Y10
	VEXTRACTF64X4 $1, Z11, Y1
	VADDPS Y1, Y11, Y11
	VHADDPS Y9, Y8, Y8
	VHADDPS Y11, Y10, Y10
	VHADDPS Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X1
	VADDPS X1, X8, X8
	MOVQ out+56(FP), AX
	VMOVUPS X8, (AX)
	VZEROUPPER
	RET

// ---- AVX-512 VNNI: q8x4x4VNNI, a prompt's tile of 4 rows by 4 tokens

DATA signBytes<>+0(SB)/8, $0x8080808080808080
GLOBL signBytes<>(SB), RODATA|NOPTR, $8

// One row's two blocks against the 4 tokens' activations (Z1-Z4, each +128
// so VPDPBUSD takes them unsigned, as the row's weights signed): Z5 holds
// the row's quants, Z6 128·(the sum of each lane's 4 quants), which the
// +128 added, Z7 the row's scales by lane; Z9-Z12 the tokens' scales by
// lane. acc0..acc3 are the row's accumulators for tokens 0..3.
#define Q8T(xt, xs, acc) \
	VPXORD Z8, Z8, Z8; \
	VPDPBUSD Z5, xt, Z8; \
	VPSUBD Z6, Z8, Z8; \
	VCVTDQ2PS Z8, Z8; \
	VMULPS xs, Z7, Z15; \
	VFMADD231PS Z8, Z15, acc

#define Q8ROW4(acc0, acc1, acc2, acc3) \
	VPXORD Z6, Z6, Z6; \
	VPDPBUSD Z5, Z14, Z6; \
	VPERMPS Z7, Z13, Z7; \
	Q8T(Z1, Z9, acc0); \
	Q8T(Z2, Z10, acc1); \
	Q8T(Z3, Z11, acc2); \
	Q8T(Z4, Z12, acc3)

// The four rows' accumulators of one token reduced to 4 floats at off(DX).
#define Q8SUM4(z0, y0, z1, y1, z2, y2, z3, y3, off) \
	VEXTRACTF64X4 $1, z0, Y5; \
	VADDPS Y5, y0, Y8; \
	VEXTRACTF64X4 $1, z1, Y5; \
	VADDPS Y5, y1, Y9; \
	VEXTRACTF64X4 $1, z2, Y5; \
	VADDPS Y5, y2, Y10; \
	VEXTRACTF64X4 $1, z3, Y5; \
	VADDPS Y5, y3, Y11; \
	VHADDPS Y9, Y8, Y8; \
	VHADDPS Y11, Y10, Y10; \
	VHADDPS Y10, Y8, Y8; \
	VEXTRACTF128 $1, Y8, X5; \
	VADDPS X5, X8, X8; \
	VMOVUPS X8, off(DX)

// func q8x4x4VNNI(w *int8, wstride int, wd *float32, dstride int, x *int8, xstride int, xd *float32, xdstride int, nb int, out *float32)
// Four weight rows (as q8x4VNNI) by four activation rows (x, x+xstride,
// ...; scales xd, xd+xdstride floats, ...): out[4t+r] = row r · token t.
// Each weight load serves four tokens, and the sign of the products comes
// from +128 on the activations (once per token) and a correction per row
// (once per row), not from a sign trick per row and token.
TEXT ·q8x4x4VNNI(SB), NOSPLIT, $0-80
	MOVQ w+0(FP), SI
	MOVQ wstride+8(FP), R10
	MOVQ wd+16(FP), R8
	MOVQ dstride+24(FP), R11
	SHLQ $2, R11
	MOVQ x+32(FP), DI
	MOVQ xstride+40(FP), R12
	MOVQ xd+48(FP), R9
	MOVQ xdstride+56(FP), R13
	SHLQ $2, R13
	MOVQ nb+64(FP), CX
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	VPXORD Z28, Z28, Z28
	VPXORD Z29, Z29, Z29
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31
	VMOVDQU32 pairScales<>(SB), Z13
	VPBROADCASTQ signBytes<>(SB), Z14
	MOVQ $0xffffffff, AX
	KMOVQ AX, K2
	MOVQ $-1, AX
	KMOVQ AX, K3 // the loop's loads: all 64 bytes

tile:
	TESTQ CX, CX
	JZ    tiledone
	CMPQ  CX, $1
	JNE   tileload
	KMOVQ K2, K3 // an odd last block: 32 bytes, and one scale each

tileload:
	// The tokens' activations +128, and their scales by lane.
	MOVQ DI, AX
	VMOVDQU8.Z (AX), K3, Z1
	VPXORD Z14, Z1, Z1
	ADDQ R12, AX
	VMOVDQU8.Z (AX), K3, Z2
	VPXORD Z14, Z2, Z2
	ADDQ R12, AX
	VMOVDQU8.Z (AX), K3, Z3
	VPXORD Z14, Z3, Z3
	ADDQ R12, AX
	VMOVDQU8.Z (AX), K3, Z4
	VPXORD Z14, Z4, Z4
	MOVQ R9, AX
	CMPQ CX, $1
	JEQ  tilexd1
	VMOVQ (AX), X9
	ADDQ R13, AX
	VMOVQ (AX), X10
	ADDQ R13, AX
	VMOVQ (AX), X11
	ADDQ R13, AX
	VMOVQ (AX), X12
	JMP tilexd
tilexd1:
	VMOVSS (AX), X9
	ADDQ R13, AX
	VMOVSS (AX), X10
	ADDQ R13, AX
	VMOVSS (AX), X11
	ADDQ R13, AX
	VMOVSS (AX), X12
tilexd:
	VPERMPS Z9, Z13, Z9
	VPERMPS Z10, Z13, Z10
	VPERMPS Z11, Z13, Z11
	VPERMPS Z12, Z13, Z12
	// A masked-off half of the +128 activations is zero again: the row's
	// correction there must be too, so its quants are loaded masked alike.
	MOVQ SI, AX
	MOVQ R8, DX
	VMOVDQU8.Z (AX), K3, Z5
	CMPQ CX, $1
	JEQ  tilewd1a
	VMOVQ (DX), X7
	JMP  tilewd1a2
tilewd1a:
	VMOVSS (DX), X7
tilewd1a2:
	Q8ROW4(Z16, Z17, Z18, Z19)
	ADDQ R10, AX
	ADDQ R11, DX
	VMOVDQU8.Z (AX), K3, Z5
	CMPQ CX, $1
	JEQ  tilewd1b
	VMOVQ (DX), X7
	JMP  tilewd1b2
tilewd1b:
	VMOVSS (DX), X7
tilewd1b2:
	Q8ROW4(Z20, Z21, Z22, Z23)
	ADDQ R10, AX
	ADDQ R11, DX
	VMOVDQU8.Z (AX), K3, Z5
	CMPQ CX, $1
	JEQ  tilewd1c
	VMOVQ (DX), X7
	JMP  tilewd1c2
tilewd1c:
	VMOVSS (DX), X7
tilewd1c2:
	Q8ROW4(Z24, Z25, Z26, Z27)
	ADDQ R10, AX
	ADDQ R11, DX
	VMOVDQU8.Z (AX), K3, Z5
	CMPQ CX, $1
	JEQ  tilewd1d
	VMOVQ (DX), X7
	JMP  tilewd1d2
tilewd1d:
	VMOVSS (DX), X7
tilewd1d2:
	Q8ROW4(Z28, Z29, Z30, Z31)
	CMPQ CX, $1
	JEQ  tiledone
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $8, R8
	ADDQ $8, R9
	SUBQ $2, CX
	JMP  tile

tiledone:
	MOVQ out+72(FP), DX
	Q8SUM4(Z16, Y16, Z20, Y20, Z24, Y24, Z28, Y28, 0)
	Q8SUM4(Z17, Y17, Z21, Y21, Z25, Y25, Z29, Y29, 16)
	Q8SUM4(Z18, Y18, Z22, Y22, Z26, Y26, Z30, Y30, 32)
	Q8SUM4(Z19, Y19, Z23, Y23, Z27, Y27, Z31, Y31, 48)
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
