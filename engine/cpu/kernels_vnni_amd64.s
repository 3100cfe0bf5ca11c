#include "textflag.h"
#include "kernels_amd64.h"

// The AVX-512 kernels of kernels.go (F, BW and VL with VNNI), run where
// hasVNNI. Go assembler operand order: sources first, destination last.

// ---- q8x4VNNI

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
	MOVQ out+56(FP), AX
	ZSUM4(Z8, Y8, Z9, Y9, Z10, Y10, Z11, Y11, Y1, Y8, Y9, Y10, Y11, X8, X1, (AX))
	VZEROUPPER
	RET

// ---- q4x4VNNI

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
	MOVQ out+56(FP), AX
	ZSUM4(Z8, Y8, Z9, Y9, Z10, Y10, Z11, Y11, Y1, Y8, Y9, Y10, Y11, X8, X1, (AX))
	VZEROUPPER
	RET

// ---- q8x4x4VNNI, a prompt's tile of 4 rows by 4 tokens

DATA signBytes<>+0(SB)/8, $0x8080808080808080
GLOBL signBytes<>(SB), RODATA|NOPTR, $8

// Lane i of the four-scale vector takes scale i/4: [0 x4, 1 x4, 2 x4, 3 x4].
DATA quadScales<>+0(SB)/8, $0
DATA quadScales<>+8(SB)/8, $0
DATA quadScales<>+16(SB)/8, $0x0000000100000001
DATA quadScales<>+24(SB)/8, $0x0000000100000001
DATA quadScales<>+32(SB)/8, $0x0000000200000002
DATA quadScales<>+40(SB)/8, $0x0000000200000002
DATA quadScales<>+48(SB)/8, $0x0000000300000003
DATA quadScales<>+56(SB)/8, $0x0000000300000003
GLOBL quadScales<>(SB), RODATA|NOPTR, $64

// One row's two blocks against the 4 tokens' activations (Z1-Z4, each +128
// so VPDPBUSD takes them unsigned, as the row's weights signed): Z5 holds
// the row's quants, Z6 128·(the sum of each lane's 4 quants), which the
// +128 added, Z7 the row's scales (which Z0 puts by lane); Z9-Z12 the
// tokens' scales by lane. acc0..acc3 are the row's accumulators for tokens 0..3.
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
	VPERMPS Z7, Z0, Z7; \
	Q8T(Z1, Z9, acc0); \
	Q8T(Z2, Z10, acc1); \
	Q8T(Z3, Z11, acc2); \
	Q8T(Z4, Z12, acc3)


// func q8x4x4VNNI(w *int8, wstride int, wd *float32, dstride int, x *int8, xstride int, xd *float32, xdstride int, nb int, out *float32, wsub int)
// Four weight rows (as q8x4VNNI) by four activation rows (x, x+xstride,
// ...; scales xd, xd+xdstride floats, ...): out[4t+r] = row r · token t.
// Each weight load serves four tokens, and the sign of the products comes
// from +128 on the activations (once per token) and a correction per row
// (once per row), not from a sign trick per row and token. wsub is the
// weights' scales per 64 bytes: 2 (a scale per block of 32, as the
// activations') or 4 (one per 16, the K-quants' unpacked tiles); nb counts
// blocks of 32 either way.
TEXT ·q8x4x4VNNI(SB), NOSPLIT, $0-88
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
	MOVQ $3, AX
	KMOVQ AX, K4 // the loop's scale loads: two floats
	MOVQ $1, AX
	KMOVQ AX, K5 // an odd last block's: one
	MOVQ $8, BX  // the scales' bytes per step
	VMOVDQU32 Z13, Z0 // the weights' scales by lane
	MOVQ wsub+80(FP), AX
	CMPQ AX, $4
	JNE  tile
	VMOVDQU32 quadScales<>(SB), Z0
	MOVQ $15, AX
	KMOVQ AX, K4
	MOVQ $3, AX
	KMOVQ AX, K5
	MOVQ $16, BX

tile:
	TESTQ CX, CX
	JZ    tiledone
	CMPQ  CX, $1
	JNE   tileload
	KMOVQ K2, K3 // an odd last block: 32 bytes, and half the scales
	KMOVQ K5, K4

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
	// correction there must be too, so its quants are loaded masked alike
	// (and its scales, which K4 masks to the step's).
	MOVQ SI, AX
	MOVQ R8, DX
	VMOVDQU8.Z (AX), K3, Z5
	VMOVUPS.Z (DX), K4, X7
	Q8ROW4(Z16, Z17, Z18, Z19)
	ADDQ R10, AX
	ADDQ R11, DX
	VMOVDQU8.Z (AX), K3, Z5
	VMOVUPS.Z (DX), K4, X7
	Q8ROW4(Z20, Z21, Z22, Z23)
	ADDQ R10, AX
	ADDQ R11, DX
	VMOVDQU8.Z (AX), K3, Z5
	VMOVUPS.Z (DX), K4, X7
	Q8ROW4(Z24, Z25, Z26, Z27)
	ADDQ R10, AX
	ADDQ R11, DX
	VMOVDQU8.Z (AX), K3, Z5
	VMOVUPS.Z (DX), K4, X7
	Q8ROW4(Z28, Z29, Z30, Z31)
	CMPQ CX, $1
	JEQ  tiledone
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ BX, R8
	ADDQ $8, R9
	SUBQ $2, CX
	JMP  tile

tiledone:
	MOVQ out+72(FP), DX
	// The four rows' accumulators of each token reduced to 4 floats at out[4t].
	ZSUM4(Z16, Y16, Z20, Y20, Z24, Y24, Z28, Y28, Y5, Y8, Y9, Y10, Y11, X8, X5, 0(DX))
	ZSUM4(Z17, Y17, Z21, Y21, Z25, Y25, Z29, Y29, Y5, Y8, Y9, Y10, Y11, X8, X5, 16(DX))
	ZSUM4(Z18, Y18, Z22, Y22, Z26, Y26, Z30, Y30, Y5, Y8, Y9, Y10, Y11, X8, X5, 32(DX))
	ZSUM4(Z19, Y19, Z23, Y23, Z27, Y27, Z31, Y31, Y5, Y8, Y9, Y10, Y11, X8, X5, 48(DX))
	VZEROUPPER
	RET
