#include "textflag.h"

// UDOTS for AVX-512 VNNI (with VL; the assembler encodes VPDPBUSD as
// EVEX, not AVX-VNNI's VEX): VPDPBUSD sums each 4 products of unsigned
// quants and signed activations into an int32 lane.
#define UDOTS \
	VPXOR Y4, Y4, Y4; \
	VPDPBUSD Y3, Y1, Y4; \
	VCVTDQ2PS Y4, Y4; \
	VPXOR Y5, Y5, Y5; \
	VPDPBUSD Y3, Y11, Y5; \
	VCVTDQ2PS Y5, Y5

#include "legacy_amd64.h"

LDATA

// func q41DotVNNI(w *byte, x *int8, xd *float32, nb int) float32
// A Q4_1 row of nb blocks dotted with Q8_0 activations (dotLegacyGo).
TEXT ·q41DotVNNI(SB), NOSPLIT, $0-36
	LPROLOGUE
q41VNNIloop:
	TESTQ CX, CX
	JZ    q41VNNIdone
	NIBBLES(4)
	SCALESDM
	LACC
	LNEXT(20)
	JMP   q41VNNIloop
q41VNNIdone:
	LEPILOGUE

// func q50DotVNNI(w *byte, x *int8, xd *float32, nb int) float32
// A Q5_0 row of nb blocks dotted with Q8_0 activations (dotLegacyGo).
TEXT ·q50DotVNNI(SB), NOSPLIT, $0-36
	LPROLOGUE
q50VNNIloop:
	TESTQ CX, CX
	JZ    q50VNNIdone
	NIBBLES(6)
	FIFTH(2)
	SCALESD16
	LACC
	LNEXT(22)
	JMP   q50VNNIloop
q50VNNIdone:
	LEPILOGUE

// func q51DotVNNI(w *byte, x *int8, xd *float32, nb int) float32
// A Q5_1 row of nb blocks dotted with Q8_0 activations (dotLegacyGo).
TEXT ·q51DotVNNI(SB), NOSPLIT, $0-36
	LPROLOGUE
q51VNNIloop:
	TESTQ CX, CX
	JZ    q51VNNIdone
	NIBBLES(8)
	FIFTH(4)
	SCALESDM
	LACC
	LNEXT(24)
	JMP   q51VNNIloop
q51VNNIdone:
	LEPILOGUE

// The prompt's tile of 16 Q4_1/Q5_0/Q5_1 rows (legacyTile), AVX-512 F, BW
// and DQ: each field of a block is gathered from the 16 rows at once (one
// dword a row, VPGATHERDD by the rows' offsets), so every vector it
// writes is already interleaved: chunk c of the block (its quants 4c..4c+3
// of each row) is dword c of the rows' nibbles, low halves, chunk 4+c the
// high ones.

// Lane i holds i.
DATA ltIota<>+0(SB)/8, $0x0000000100000000
DATA ltIota<>+8(SB)/8, $0x0000000300000002
DATA ltIota<>+16(SB)/8, $0x0000000500000004
DATA ltIota<>+24(SB)/8, $0x0000000700000006
DATA ltIota<>+32(SB)/8, $0x0000000900000008
DATA ltIota<>+40(SB)/8, $0x0000000b0000000a
DATA ltIota<>+48(SB)/8, $0x0000000d0000000c
DATA ltIota<>+56(SB)/8, $0x0000000f0000000e
GLOBL ltIota<>(SB), RODATA|NOPTR, $64

DATA ltNib<>+0(SB)/4, $0x0f0f0f0f
GLOBL ltNib<>(SB), RODATA|NOPTR, $4
DATA ltLow4<>+0(SB)/4, $0x0000000f
GLOBL ltLow4<>(SB), RODATA|NOPTR, $4
DATA ltSpread<>+0(SB)/4, $0x00204081
GLOBL ltSpread<>(SB), RODATA|NOPTR, $4
DATA ltBit4<>+0(SB)/4, $0x10101010
GLOBL ltBit4<>(SB), RODATA|NOPTR, $4

// LTGATHER(off, base, dst): dword off(base) of each of the 16 rows.
#define LTGATHER(off, base, dst) \
	KXNORW K1, K1, K1; \
	VPGATHERDD off(base)(Z31*1), K1, dst

// LTFIFTH(sh, v): bits sh..sh+3 of each row's qh (Z2; zero for Q4_1) as
// bit 4 of the four bytes of v's lane (bit sh+b to byte b: n·0x00204081
// puts bit b of n at bit 8b), or'ed into v.
#define LTFIFTH(sh, v) \
	VPSRLD $sh, Z2, Z4; \
	VPANDD Z25, Z4, Z4; \
	VPMULLD Z28, Z4, Z4; \
	VPSLLD $4, Z4, Z4; \
	VPANDD Z27, Z4, Z4; \
	VPORD Z4, v, v

// LTCHUNK(c): chunks c and 4+c of the block (R11: its nibbles).
#define LTCHUNK(c) \
	LTGATHER(4*c, R11, Z3); \
	VPSRLD $4, Z3, Z5; \
	VPANDD Z29, Z3, Z3; \
	VPANDD Z29, Z5, Z5; \
	LTFIFTH(4*c, Z3); \
	LTFIFTH(16+4*c, Z5); \
	VPADDB Z26, Z3, Z3; \
	VPADDB Z26, Z5, Z5; \
	VMOVDQU32 Z3, (64*c)(DI); \
	VMOVDQU32 Z5, (256+64*c)(DI)

// func legacyTileVNNI(raw *byte, rb, nb, lb, qs, qh, m, bias int, q *byte, d *float32)
// Rows raw, raw+rb, ... (16, nb blocks of lb bytes: the nibbles at qs,
// the fifth bits at qh and the min at m, −1 where none) into q (nb·512
// bytes: each block's 8 chunks of 16 rows' 4 bytes, each quant + bias)
// and d (nb·32: each block's 16 scales, then its 16 mins or zeros).
TEXT ·legacyTileVNNI(SB), NOSPLIT, $0-80
	MOVQ raw+0(FP), SI
	MOVQ rb+8(FP), AX
	MOVQ nb+16(FP), CX
	MOVQ lb+24(FP), DX
	MOVQ qs+32(FP), R8
	MOVQ qh+40(FP), R9
	MOVQ m+48(FP), R10
	MOVQ q+64(FP), DI
	MOVQ d+72(FP), BX
	VPBROADCASTD AX, Z30
	VPMULLD ltIota<>(SB), Z30, Z31
	MOVQ bias+56(FP), R12
	VPBROADCASTB R12, Z26
	VPBROADCASTD ltNib<>(SB), Z29
	VPBROADCASTD ltLow4<>(SB), Z25
	VPBROADCASTD ltSpread<>(SB), Z28
	VPBROADCASTD ltBit4<>(SB), Z27
	VPXORD Z2, Z2, Z2
	VPXORD Z6, Z6, Z6

ltloop:
	TESTQ CX, CX
	JZ    ltdone
	LTGATHER(0, SI, Z0)
	VPMOVDW Z0, Y0
	VCVTPH2PS Y0, Z0
	VMOVUPS Z0, (BX)
	TESTQ R10, R10
	JS    ltnomin
	LEAQ (SI)(R10*1), R11
	LTGATHER(0, R11, Z1)
	VPMOVDW Z1, Y1
	VCVTPH2PS Y1, Z1
	VMOVUPS Z1, 64(BX)
	JMP   ltqh

ltnomin:
	VMOVUPS Z6, 64(BX)

ltqh:
	TESTQ R9, R9
	JS    ltqs
	LEAQ (SI)(R9*1), R11
	LTGATHER(0, R11, Z2)

ltqs:
	LEAQ (SI)(R8*1), R11
	LTCHUNK(0)
	LTCHUNK(1)
	LTCHUNK(2)
	LTCHUNK(3)
	ADDQ DX, SI
	ADDQ $512, DI
	ADDQ $128, BX
	DECQ CX
	JMP  ltloop

ltdone:
	VZEROUPPER
	RET
