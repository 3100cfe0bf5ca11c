#include "textflag.h"

// The Q8_0 product over weights interleaved by 16 rows (q8i.go), AVX-512
// VNNI. A block's 16 rows are 8 vectors of 4 bytes a row (+128, so
// VPDPBUSD takes them unsigned) and 16 scales; a token's 4 bytes of the
// block are broadcast to every row's lane, so one VPDPBUSD is 64 products
// of 16 rows, with no per-lane reduction left at the end. The +128 adds
// 128·(the sum of the token's block) to each row's sum: the accumulator
// starts at minus that (q8iAct.s), so the integer sum is exact. Then per
// token and block: float(sum) · (weight scale · token scale) into the
// token's 16 row accumulators, one block after another, so a row and token
// give the same float whatever tile they run in (1, 4 or 8 tokens).
//
// Registers: SI weights, R8 their scales, CX blocks left; DI tokens 0-3's
// quants (R11 their stride, R12 3·stride), R10 tokens 4-7's; R9 tokens
// 0-3's q8iAct {d, s} (DX the stride, AX 3·stride), R13 tokens 4-7's.
// Z0-Z7 the tokens' integer sums, Z8-Z15 their rows' floats, Z16 the
// block's 16 weight scales, Z17 the scale product, Z24 a weight vector.

// DOTn(c): the block's weight vector c (bytes 64c) against tokens 0..n-1's
// bytes 4c..4c+3.
#define DOT1(woff, xoff) \
	VMOVDQU32 woff(SI), Z24; \
	VPDPBUSD.BCST xoff(DI), Z24, Z0

#define DOT4(woff, xoff) \
	DOT1(woff, xoff); \
	VPDPBUSD.BCST xoff(DI)(R11*1), Z24, Z1; \
	VPDPBUSD.BCST xoff(DI)(R11*2), Z24, Z2; \
	VPDPBUSD.BCST xoff(DI)(R12*1), Z24, Z3

#define DOT8(woff, xoff) \
	DOT4(woff, xoff); \
	VPDPBUSD.BCST xoff(R10), Z24, Z4; \
	VPDPBUSD.BCST xoff(R10)(R11*1), Z24, Z5; \
	VPDPBUSD.BCST xoff(R10)(R11*2), Z24, Z6; \
	VPDPBUSD.BCST xoff(R10)(R12*1), Z24, Z7

#define BLOCK(DOT) \
	DOT(0, 0); \
	DOT(64, 4); \
	DOT(128, 8); \
	DOT(192, 12); \
	DOT(256, 16); \
	DOT(320, 20); \
	DOT(384, 24); \
	DOT(448, 28)

// FIN: a token's block sum (zi) scaled into its rows' floats (zf); act is
// the token's q8iAct of the block.
#define FIN(act, zi, zf) \
	VCVTDQ2PS zi, zi; \
	VMULPS.BCST act, Z16, Z17; \
	VFMADD231PS zi, Z17, zf

// The arguments of every q8i16xN: (w *byte, wd *float32, nb int, x *int8,
// xstride int, xa *q8iAct, astride int, out *float32, ostride int), the
// strides in bytes; token t's 16 floats go to out + t·ostride.
#define ARGS \
	MOVQ w+0(FP), SI; \
	MOVQ wd+8(FP), R8; \
	MOVQ nb+16(FP), CX; \
	MOVQ x+24(FP), DI; \
	MOVQ xstride+32(FP), R11; \
	MOVQ xa+40(FP), R9; \
	MOVQ astride+48(FP), DX; \
	LEAQ (R11)(R11*2), R12; \
	LEAQ (DI)(R11*4), R10; \
	LEAQ (DX)(DX*2), AX; \
	LEAQ (R9)(DX*4), R13

#define NEXT \
	ADDQ $512, SI; \
	ADDQ $64, R8; \
	ADDQ $32, DI; \
	ADDQ $32, R10; \
	ADDQ $8, R9; \
	ADDQ $8, R13; \
	DECQ CX

#define ZERO4(z0, z1, z2, z3) \
	VPXORD z0, z0, z0; \
	VPXORD z1, z1, z1; \
	VPXORD z2, z2, z2; \
	VPXORD z3, z3, z3

// INIT4: four tokens' integer sums start at their blocks' q8iAct.s (acts:
// R9 or R13).
#define INIT4(acts, z0, z1, z2, z3) \
	VPBROADCASTD 4(acts), z0; \
	VPBROADCASTD 4(acts)(DX*1), z1; \
	VPBROADCASTD 4(acts)(DX*2), z2; \
	VPBROADCASTD 4(acts)(AX*1), z3

#define FIN4(acts, z0, z1, z2, z3, f0, f1, f2, f3) \
	FIN((acts), z0, f0); \
	FIN((acts)(DX*1), z1, f1); \
	FIN((acts)(DX*2), z2, f2); \
	FIN((acts)(AX*1), z3, f3)

// STORE4: four tokens' 16 rows at base + t·ostride (R11, R12 3·ostride).
#define STORE4(base, f0, f1, f2, f3) \
	VMOVUPS f0, (base); \
	VMOVUPS f1, (base)(R11*1); \
	VMOVUPS f2, (base)(R11*2); \
	VMOVUPS f3, (base)(R12*1)

#define OUT \
	MOVQ out+56(FP), BX; \
	MOVQ ostride+64(FP), R11; \
	LEAQ (R11)(R11*2), R12; \
	LEAQ (BX)(R11*4), R10

// func q8i16x8VNNI(w *byte, wd *float32, nb int, x *int8, xstride int, xa *q8iAct, astride int, out *float32, ostride int)
TEXT ·q8i16x8VNNI(SB), NOSPLIT, $0-72
	ARGS
	ZERO4(Z8, Z9, Z10, Z11)
	ZERO4(Z12, Z13, Z14, Z15)

x8loop:
	VMOVUPS (R8), Z16
	INIT4(R9, Z0, Z1, Z2, Z3)
	INIT4(R13, Z4, Z5, Z6, Z7)
	BLOCK(DOT8)
	FIN4(R9, Z0, Z1, Z2, Z3, Z8, Z9, Z10, Z11)
	FIN4(R13, Z4, Z5, Z6, Z7, Z12, Z13, Z14, Z15)
	NEXT
	JNZ x8loop

	OUT
	STORE4(BX, Z8, Z9, Z10, Z11)
	STORE4(R10, Z12, Z13, Z14, Z15)
	VZEROUPPER
	RET

// func q8i16x4VNNI(w *byte, wd *float32, nb int, x *int8, xstride int, xa *q8iAct, astride int, out *float32, ostride int)
TEXT ·q8i16x4VNNI(SB), NOSPLIT, $0-72
	ARGS
	ZERO4(Z8, Z9, Z10, Z11)

x4loop:
	VMOVUPS (R8), Z16
	INIT4(R9, Z0, Z1, Z2, Z3)
	BLOCK(DOT4)
	FIN4(R9, Z0, Z1, Z2, Z3, Z8, Z9, Z10, Z11)
	NEXT
	JNZ x4loop

	OUT
	STORE4(BX, Z8, Z9, Z10, Z11)
	VZEROUPPER
	RET

// func q8i16x1VNNI(w *byte, wd *float32, nb int, x *int8, xstride int, xa *q8iAct, astride int, out *float32, ostride int)
// One token: its integer sum is split over two accumulators (vectors
// 0-3 and 4-7 of the block), so that eight VPDPBUSD do not wait on each
// other in one chain; the sum is exact either way.
TEXT ·q8i16x1VNNI(SB), NOSPLIT, $0-72
	ARGS
	VPXORD Z8, Z8, Z8

x1loop:
	VMOVUPS (R8), Z16
	VPBROADCASTD 4(R9), Z0
	VPXORD Z1, Z1, Z1
	VMOVDQU32 0(SI), Z24
	VPDPBUSD.BCST 0(DI), Z24, Z0
	VMOVDQU32 256(SI), Z25
	VPDPBUSD.BCST 16(DI), Z25, Z1
	VMOVDQU32 64(SI), Z24
	VPDPBUSD.BCST 4(DI), Z24, Z0
	VMOVDQU32 320(SI), Z25
	VPDPBUSD.BCST 20(DI), Z25, Z1
	VMOVDQU32 128(SI), Z24
	VPDPBUSD.BCST 8(DI), Z24, Z0
	VMOVDQU32 384(SI), Z25
	VPDPBUSD.BCST 24(DI), Z25, Z1
	VMOVDQU32 192(SI), Z24
	VPDPBUSD.BCST 12(DI), Z24, Z0
	VMOVDQU32 448(SI), Z25
	VPDPBUSD.BCST 28(DI), Z25, Z1
	VPADDD Z1, Z0, Z0
	FIN((R9), Z0, Z8)
	NEXT
	JNZ x1loop

	MOVQ out+56(FP), BX
	VMOVUPS Z8, (BX)
	VZEROUPPER
	RET

// The same products over a Q4_1/Q5_0/Q5_1 tile (legacyTile): each weight
// is d·u + c, its quants u interleaved as Q8_0's are, so the kernels above
// give d·Σu·x; the constants c (16 a block, after its 16 scales: R8
// advances 128 a block) meet each token block's xd·Σx (q8lAct.xs, 16
// bytes an act) in one more FMA per token and block.

// LFIN4: FIN4, then each token's xs times the block's 16 constants (Z18).
#define LFIN4(acts, z0, z1, z2, z3, f0, f1, f2, f3) \
	FIN4(acts, z0, z1, z2, z3, f0, f1, f2, f3); \
	VFMADD231PS.BCST 8(acts), Z18, f0; \
	VFMADD231PS.BCST 8(acts)(DX*1), Z18, f1; \
	VFMADD231PS.BCST 8(acts)(DX*2), Z18, f2; \
	VFMADD231PS.BCST 8(acts)(AX*1), Z18, f3

#define LSCALES \
	VMOVUPS (R8), Z16; \
	VMOVUPS 64(R8), Z18

#define LNEXT \
	ADDQ $512, SI; \
	ADDQ $128, R8; \
	ADDQ $32, DI; \
	ADDQ $32, R10; \
	ADDQ $16, R9; \
	ADDQ $16, R13; \
	DECQ CX

// func q8l16x8VNNI(w *byte, wd *float32, nb int, x *int8, xstride int, xa *q8lAct, astride int, out *float32, ostride int)
TEXT ·q8l16x8VNNI(SB), NOSPLIT, $0-72
	ARGS
	ZERO4(Z8, Z9, Z10, Z11)
	ZERO4(Z12, Z13, Z14, Z15)

l8loop:
	LSCALES
	INIT4(R9, Z0, Z1, Z2, Z3)
	INIT4(R13, Z4, Z5, Z6, Z7)
	BLOCK(DOT8)
	LFIN4(R9, Z0, Z1, Z2, Z3, Z8, Z9, Z10, Z11)
	LFIN4(R13, Z4, Z5, Z6, Z7, Z12, Z13, Z14, Z15)
	LNEXT
	JNZ l8loop

	OUT
	STORE4(BX, Z8, Z9, Z10, Z11)
	STORE4(R10, Z12, Z13, Z14, Z15)
	VZEROUPPER
	RET

// func q8l16x4VNNI(w *byte, wd *float32, nb int, x *int8, xstride int, xa *q8lAct, astride int, out *float32, ostride int)
TEXT ·q8l16x4VNNI(SB), NOSPLIT, $0-72
	ARGS
	ZERO4(Z8, Z9, Z10, Z11)

l4loop:
	LSCALES
	INIT4(R9, Z0, Z1, Z2, Z3)
	BLOCK(DOT4)
	LFIN4(R9, Z0, Z1, Z2, Z3, Z8, Z9, Z10, Z11)
	LNEXT
	JNZ l4loop

	OUT
	STORE4(BX, Z8, Z9, Z10, Z11)
	VZEROUPPER
	RET

// func q8l16x1VNNI(w *byte, wd *float32, nb int, x *int8, xstride int, xa *q8lAct, astride int, out *float32, ostride int)
TEXT ·q8l16x1VNNI(SB), NOSPLIT, $0-72
	ARGS
	VPXORD Z8, Z8, Z8

l1loop:
	LSCALES
	VPBROADCASTD 4(R9), Z0
	BLOCK(DOT1)
	FIN((R9), Z0, Z8)
	VFMADD231PS.BCST 8(R9), Z18, Z8
	LNEXT
	JNZ l1loop

	MOVQ out+56(FP), BX
	VMOVUPS Z8, (BX)
	VZEROUPPER
	RET
