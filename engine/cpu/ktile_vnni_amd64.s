#include "textflag.h"

// kTileVNNI, the prompt's K-quant tile (ktile.go): AVX-512 F, BW, VL and
// VNNI, run where hasVNNI. Go assembler operand order: sources first,
// destination last.

// Lane i takes dword i/4: [0 x4, 1 x4, 2 x4, 3 x4].
DATA ktQuad<>+0(SB)/8, $0
DATA ktQuad<>+8(SB)/8, $0
DATA ktQuad<>+16(SB)/8, $0x0000000100000001
DATA ktQuad<>+24(SB)/8, $0x0000000100000001
DATA ktQuad<>+32(SB)/8, $0x0000000200000002
DATA ktQuad<>+40(SB)/8, $0x0000000200000002
DATA ktQuad<>+48(SB)/8, $0x0000000300000003
DATA ktQuad<>+56(SB)/8, $0x0000000300000003
GLOBL ktQuad<>(SB), RODATA|NOPTR, $64

// Qword i/2 in lane i: [0, 0, 1, 1, 2, 2, 3, 3].
DATA ktPairQ<>+0(SB)/8, $0
DATA ktPairQ<>+8(SB)/8, $0
DATA ktPairQ<>+16(SB)/8, $1
DATA ktPairQ<>+24(SB)/8, $1
DATA ktPairQ<>+32(SB)/8, $2
DATA ktPairQ<>+40(SB)/8, $2
DATA ktPairQ<>+48(SB)/8, $3
DATA ktPairQ<>+56(SB)/8, $3
GLOBL ktPairQ<>(SB), RODATA|NOPTR, $64

// One row's chunk of 64 quants (unsigned) at off(SI) against the four
// tokens' (signed, Z1-Z4): each int32 lane of a0..a3 gathers 4 products of
// one group.
#define KROW(off, a0, a1, a2, a3) \
	VMOVDQU32 off(SI), Z0; \
	VPDPBUSD Z1, Z0, a0; \
	VPDPBUSD Z2, Z0, a1; \
	VPDPBUSD Z3, Z0, a2; \
	VPDPBUSD Z4, Z0, a3

// Chunk c (at byte c·64 of each token, c·256 of the tile) of a super-block.
#define KCHUNK(xo, wo0, wo1, wo2, wo3) \
	VMOVDQU32 xo(DI), Z1; \
	VMOVDQU32 xo(DI)(R12*1), Z2; \
	VMOVDQU32 xo(DI)(R12*2), Z3; \
	VMOVDQU32 xo(DI)(R13*1), Z4; \
	KROW(wo0, Z16, Z17, Z18, Z19); \
	KROW(wo1, Z20, Z21, Z22, Z23); \
	KROW(wo2, Z24, Z25, Z26, Z27); \
	KROW(wo3, Z28, Z29, Z30, Z31)

// Row r's group sums times its 16 scales (int8 at off(SI)).
#define KSCALE(off, a0, a1, a2, a3) \
	VPMOVSXBD off(SI), Z0; \
	VPMULLD Z0, a0, a0; \
	VPMULLD Z0, a1, a1; \
	VPMULLD Z0, a2, a2; \
	VPMULLD Z0, a3, a3

// Row r's group sums (a0..a3, Q4_K's: they fit int16) times its scales
// (int8 at off(SI)) and paired, as KSCALE then KPAIR but in six
// instructions where those take ten and eight multiplies: a0 and a1
// packed to words (VPACKSSDW: per 128-bit block a0's 4 then a1's 4), then
// VPMADDWD with the scales so laid out (Z13 puts each block's 4 words in
// both its halves) → a0: per block [a0 0+1, a0 2+3, a1 0+1, a1 2+3];
// likewise a2, a3 → a2.
#define KNARROW(off, a0, a1, a2, a3) \
	VPMOVSXBW off(SI), Y0; \
	VPERMQ Z0, Z13, Z0; \
	VPACKSSDW a1, a0, a0; \
	VPMADDWD Z0, a0, a0; \
	VPACKSSDW a3, a2, a2; \
	VPMADDWD Z0, a2, a2

// a, b → a: per 128-bit block [a0+a2, a1+a3, b0+b2, b1+b3].
#define KPAIR(a, b) \
	VPUNPCKLQDQ b, a, Z0; \
	VPUNPCKHQDQ b, a, a; \
	VPADDD Z0, a, a

// c, d (KPAIR's) → c: per 128-bit block [c0+c1, c2+c3, d0+d1, d2+d3].
#define KQUAD(c, d) \
	VSHUFPS $0x88, d, c, Z0; \
	VSHUFPS $0xDD, d, c, c; \
	VPADDD Z0, c, c

// p, q → p: blocks [p0+p2, p1+p3, q0+q2, q1+q3].
#define KHALF(p, q) \
	VSHUFI32X4 $0x44, q, p, Z0; \
	VSHUFI32X4 $0xEE, q, p, p; \
	VPADDD Z0, p, p

// Pair k of the mins (row r in dword r of 16k+ktMin(SI), token t in dword
// t of 16k(BX)) into Z5's lane 4r+t.
#define KMIN(k) \
	VBROADCASTI32X4 (16*k)(BX), Z6; \
	VPERMD (1088+16*k)(SI), Z14, Z7; \
	VPDPWSSD Z6, Z7, Z5

// Lane 4t+r takes lane 4r+t: [0 4 8 12, 1 5 9 13, ...].
DATA ktTrans<>+0(SB)/8, $0x0000000400000000
DATA ktTrans<>+8(SB)/8, $0x0000000c00000008
DATA ktTrans<>+16(SB)/8, $0x0000000500000001
DATA ktTrans<>+24(SB)/8, $0x0000000d00000009
DATA ktTrans<>+32(SB)/8, $0x0000000600000002
DATA ktTrans<>+40(SB)/8, $0x0000000e0000000a
DATA ktTrans<>+48(SB)/8, $0x0000000700000003
DATA ktTrans<>+56(SB)/8, $0x0000000f0000000b
GLOBL ktTrans<>(SB), RODATA|NOPTR, $64

// func kTileVNNI(w *byte, x *int8, xstride int, tab *uint32, nk int, out *float32, ostride int, groups int, narrow int)
// Row r of the packed tile w (kPack: ktSB bytes a super-block) · token t
// of each of groups groups of four tokens (x: group-lane order, tokens
// xstride bytes apart, one group after another; tab their tables, ktTab
// uint32s a super-block, one group's nk after another's) into
// out[(4j+t)·ostride + r] for group j, over nk super-blocks. Per
// super-block: the 16 row-token sums of q·x by group in int32 lanes
// (Z16-Z31, row r token t in Z16+4r+t), times the scales, reduced to one
// vector I (lane 4r+t); the mins' sums M likewise; then the float sums
// Z15 += I·(d·xd) − M·(dm·xd). narrow != 0 says the group sums fit int16
// (Q4_K: 16·15·127), so that KNARROW scales them.
TEXT ·kTileVNNI(SB), NOSPLIT, $0-72
	MOVQ w+0(FP), R10
	MOVQ x+8(FP), AX
	MOVQ xstride+16(FP), R12
	MOVQ tab+24(FP), BX
	MOVQ out+40(FP), DX
	MOVQ ostride+48(FP), R9
	SHLQ $2, R9
	MOVQ groups+56(FP), R8
	MOVQ narrow+64(FP), R11
	LEAQ (R12)(R12*2), R13
	VMOVDQU32 ktQuad<>(SB), Z14
	VMOVDQU64 ktPairQ<>(SB), Z13
	VMOVDQU32 ktTrans<>(SB), Z12

ktgroup:
	TESTQ R8, R8
	JZ    ktend
	MOVQ  R10, SI
	MOVQ  AX, DI
	MOVQ  nk+32(FP), CX
	VPXORD Z15, Z15, Z15

ktblock:
	TESTQ CX, CX
	JZ    ktdone
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
	KCHUNK(0, 0, 64, 128, 192)
	KCHUNK(64, 256, 320, 384, 448)
	KCHUNK(128, 512, 576, 640, 704)
	KCHUNK(192, 768, 832, 896, 960)
	TESTQ R11, R11
	JNZ   ktnarrow
	KSCALE(1024, Z16, Z17, Z18, Z19)
	KSCALE(1040, Z20, Z21, Z22, Z23)
	KSCALE(1056, Z24, Z25, Z26, Z27)
	KSCALE(1072, Z28, Z29, Z30, Z31)
	KPAIR(Z16, Z17)
	KPAIR(Z18, Z19)
	KPAIR(Z20, Z21)
	KPAIR(Z22, Z23)
	KPAIR(Z24, Z25)
	KPAIR(Z26, Z27)
	KPAIR(Z28, Z29)
	KPAIR(Z30, Z31)
	JMP   ktreduce

ktnarrow:
	KNARROW(1024, Z16, Z17, Z18, Z19)
	KNARROW(1040, Z20, Z21, Z22, Z23)
	KNARROW(1056, Z24, Z25, Z26, Z27)
	KNARROW(1072, Z28, Z29, Z30, Z31)

ktreduce:
	KQUAD(Z16, Z18)
	KQUAD(Z20, Z22)
	KQUAD(Z24, Z26)
	KQUAD(Z28, Z30)
	KHALF(Z16, Z20)
	KHALF(Z24, Z28)
	VSHUFI32X4 $0x88, Z24, Z16, Z0
	VSHUFI32X4 $0xDD, Z24, Z16, Z16
	VPADDD Z0, Z16, Z16
	VPXORD Z5, Z5, Z5
	KMIN(0)
	KMIN(1)
	KMIN(2)
	KMIN(3)
	KMIN(4)
	KMIN(5)
	KMIN(6)
	KMIN(7)
	VCVTDQ2PS Z16, Z16
	VCVTDQ2PS Z5, Z5
	VBROADCASTF32X4 128(BX), Z8
	VMULPS 1216(SI), Z8, Z9
	VMULPS 1280(SI), Z8, Z10
	VFMADD231PS Z9, Z16, Z15
	VFNMADD231PS Z10, Z5, Z15
	ADDQ $1344, SI
	ADDQ $256, DI
	ADDQ $144, BX
	DECQ CX
	JMP  ktblock

ktdone:
	// Z15 by token: lane 4t+r, each token's 4 rows at out + t·ostride.
	VPERMD Z15, Z12, Z15
	VMOVUPS X15, (DX)
	ADDQ R9, DX
	VEXTRACTF32X4 $1, Z15, (DX)
	ADDQ R9, DX
	VEXTRACTF32X4 $2, Z15, (DX)
	ADDQ R9, DX
	VEXTRACTF32X4 $3, Z15, (DX)
	ADDQ R9, DX
	LEAQ (AX)(R12*4), AX
	DECQ R8
	JMP  ktgroup

ktend:
	VZEROUPPER
	RET

// Chunk 0's dwords of a Q4_K block's qs for laneQ4KVNNI (chunk c adds c):
// lanes 4P..4P+3 take dwords 8P, 8P+4 (low nibbles), 8P, 8P+4 (high).
DATA ktQ4Idx<>+0(SB)/8, $0x0000000400000000
DATA ktQ4Idx<>+8(SB)/8, $0x0000000400000000
DATA ktQ4Idx<>+16(SB)/8, $0x0000000c00000008
DATA ktQ4Idx<>+24(SB)/8, $0x0000000c00000008
DATA ktQ4Idx<>+32(SB)/8, $0x0000001400000010
DATA ktQ4Idx<>+40(SB)/8, $0x0000001400000010
DATA ktQ4Idx<>+48(SB)/8, $0x0000001c00000018
DATA ktQ4Idx<>+56(SB)/8, $0x0000001c00000018
GLOBL ktQ4Idx<>(SB), RODATA|NOPTR, $64

// Their shifts: 0 for the low nibbles, 4 for the high.
DATA ktQ4Shift<>+0(SB)/8, $0
DATA ktQ4Shift<>+8(SB)/8, $0x0000000400000004
DATA ktQ4Shift<>+16(SB)/8, $0
DATA ktQ4Shift<>+24(SB)/8, $0x0000000400000004
DATA ktQ4Shift<>+32(SB)/8, $0
DATA ktQ4Shift<>+40(SB)/8, $0x0000000400000004
DATA ktQ4Shift<>+48(SB)/8, $0
DATA ktQ4Shift<>+56(SB)/8, $0x0000000400000004
GLOBL ktQ4Shift<>(SB), RODATA|NOPTR, $64

DATA ktNib<>+0(SB)/4, $0x0f0f0f0f
GLOBL ktNib<>(SB), RODATA|NOPTR, $4
DATA ktOne<>+0(SB)/4, $1
GLOBL ktOne<>(SB), RODATA|NOPTR, $4

// One chunk of laneQ4KVNNI: Z3 its index (then the next chunk's).
#define KLANE4(off) \
	VMOVDQA32 Z3, Z0; \
	VPERMI2D Z2, Z1, Z0; \
	VPSRLVD Z4, Z0, Z0; \
	VPANDD Z5, Z0, Z0; \
	VMOVDQU32 Z0, off(DI); \
	VPADDD Z6, Z3, Z3

// func laneQ4KVNNI(dst *byte, qs *byte)
// laneQ4K: a Q4_K block's 128 bytes of quants (qs) as one row of a packed
// tile's four chunks (dst, 256 bytes apart), in group-lane order.
TEXT ·laneQ4KVNNI(SB), NOSPLIT, $0-16
	MOVQ dst+0(FP), DI
	MOVQ qs+8(FP), SI
	VMOVDQU32 (SI), Z1
	VMOVDQU32 64(SI), Z2
	VMOVDQU32 ktQ4Idx<>(SB), Z3
	VMOVDQU32 ktQ4Shift<>(SB), Z4
	VPBROADCASTD ktNib<>(SB), Z5
	VPBROADCASTD ktOne<>(SB), Z6
	KLANE4(0)
	KLANE4(256)
	KLANE4(512)
	KLANE4(768)
	VZEROUPPER
	RET

// func kPrefetch(p *byte, n int)
TEXT ·kPrefetch(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	ADDQ SI, CX
kpf:
	CMPQ SI, CX
	JAE  kpfdone
	PREFETCHT0 (SI)
	ADDQ $64, SI
	JMP  kpf
kpfdone:
	RET

// lane2VNNI's constants: lane L of chunk 0 takes dword 8(L/8) + 4(L%2) of
// the 2-bit quants (chunk c adds c) shifted right by 2·((L%8)/2), and
// dword 4(L%2) of hmask (chunk c adds c) by 4(L/8) + (L%8)/2.
DATA kt2Idx<>+0(SB)/8, $0x0000000400000000
DATA kt2Idx<>+8(SB)/8, $0x0000000400000000
DATA kt2Idx<>+16(SB)/8, $0x0000000400000000
DATA kt2Idx<>+24(SB)/8, $0x0000000400000000
DATA kt2Idx<>+32(SB)/8, $0x0000000c00000008
DATA kt2Idx<>+40(SB)/8, $0x0000000c00000008
DATA kt2Idx<>+48(SB)/8, $0x0000000c00000008
DATA kt2Idx<>+56(SB)/8, $0x0000000c00000008
GLOBL kt2Idx<>(SB), RODATA|NOPTR, $64

DATA kt2Shift<>+0(SB)/8, $0
DATA kt2Shift<>+8(SB)/8, $0x0000000200000002
DATA kt2Shift<>+16(SB)/8, $0x0000000400000004
DATA kt2Shift<>+24(SB)/8, $0x0000000600000006
DATA kt2Shift<>+32(SB)/8, $0
DATA kt2Shift<>+40(SB)/8, $0x0000000200000002
DATA kt2Shift<>+48(SB)/8, $0x0000000400000004
DATA kt2Shift<>+56(SB)/8, $0x0000000600000006
GLOBL kt2Shift<>(SB), RODATA|NOPTR, $64

DATA kt3Idx<>+0(SB)/8, $0x0000000400000000
DATA kt3Idx<>+8(SB)/8, $0x0000000400000000
DATA kt3Idx<>+16(SB)/8, $0x0000000400000000
DATA kt3Idx<>+24(SB)/8, $0x0000000400000000
DATA kt3Idx<>+32(SB)/8, $0x0000000400000000
DATA kt3Idx<>+40(SB)/8, $0x0000000400000000
DATA kt3Idx<>+48(SB)/8, $0x0000000400000000
DATA kt3Idx<>+56(SB)/8, $0x0000000400000000
GLOBL kt3Idx<>(SB), RODATA|NOPTR, $64

DATA kt3Shift<>+0(SB)/8, $0
DATA kt3Shift<>+8(SB)/8, $0x0000000100000001
DATA kt3Shift<>+16(SB)/8, $0x0000000200000002
DATA kt3Shift<>+24(SB)/8, $0x0000000300000003
DATA kt3Shift<>+32(SB)/8, $0x0000000400000004
DATA kt3Shift<>+40(SB)/8, $0x0000000500000005
DATA kt3Shift<>+48(SB)/8, $0x0000000600000006
DATA kt3Shift<>+56(SB)/8, $0x0000000700000007
GLOBL kt3Shift<>(SB), RODATA|NOPTR, $64

DATA kt2Mask<>+0(SB)/4, $0x03030303
GLOBL kt2Mask<>(SB), RODATA|NOPTR, $4
DATA kt3Mask<>+0(SB)/4, $0x01010101
GLOBL kt3Mask<>(SB), RODATA|NOPTR, $4

// One chunk of lane2VNNI: Z3 its quants' index, Z8 its hmask index (then
// the next chunk's); Z2 hmask, zero for Q2_K.
#define KLANE2(off) \
	VMOVDQA32 Z3, Z0; \
	VPERMD Z1, Z0, Z0; \
	VPSRLVD Z4, Z0, Z0; \
	VPANDD Z5, Z0, Z0; \
	VPERMD Z2, Z8, Z7; \
	VPSRLVD Z9, Z7, Z7; \
	VPANDD Z10, Z7, Z7; \
	VPSLLD $2, Z7, Z7; \
	VPORD Z7, Z0, Z0; \
	VMOVDQU32 Z0, off(DI); \
	VPADDD Z6, Z3, Z3; \
	VPADDD Z6, Z8, Z8

// func lane2VNNI(dst *byte, qs *byte, hmask *byte)
// lane2: a block's 64 bytes of 2-bit quants (qs) and, unless hmask is
// nil, their 32 bytes of third bits as one row of a packed tile's four
// chunks (dst, 256 bytes apart), in group-lane order.
TEXT ·lane2VNNI(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ qs+8(FP), SI
	MOVQ hmask+16(FP), DX
	VMOVDQU32 (SI), Z1
	VPXORD Z2, Z2, Z2
	TESTQ DX, DX
	JZ    l2nohmask
	VMOVDQU (DX), Y2

l2nohmask:
	VMOVDQU32 kt2Idx<>(SB), Z3
	VMOVDQU32 kt2Shift<>(SB), Z4
	VPBROADCASTD kt2Mask<>(SB), Z5
	VPBROADCASTD ktOne<>(SB), Z6
	VMOVDQU32 kt3Idx<>(SB), Z8
	VMOVDQU32 kt3Shift<>(SB), Z9
	VPBROADCASTD kt3Mask<>(SB), Z10
	KLANE2(0)
	KLANE2(256)
	KLANE2(512)
	KLANE2(768)
	VZEROUPPER
	RET
