// The Q2_K and Q3_K dot products' blocks (klow.go), shared by the AVX2
// kernels (klow_avx2_amd64.s) and the AVX-512 VNNI ones
// (klow_vnni_amd64.s), which differ in MADDACC(p, s, acc): acc += p·s in
// int16 pairs summed to int32 (VPMADDWD and VPADDD, or VNNI's VPDPWSSD).
//
// Registers, for one row: SI the block, DI its 256 activations, R8 their
// scale, R9 their 16 sums; Y0 the float sum; Y15 bytes of 3, Y10 bytes of
// 1, Y12 bytes of 0x0f, Y11 bytes of 32. Each block clobbers Y1-Y9, Y13,
// Y14 and AX. Both types are 2-bit crumbs, element 128h+32s+l at bits 2s
// of byte l of half h's 32 bytes; a 32-element part (h, s) is groups
// 8h+2s and 8h+2s+1 of 16, whose VPMADDUBSW pair sums fill the low and
// high 128-bit lanes, so q6kShuf's part s (kquant_amd64.h, which the
// including file includes first, with its KPROLOGUE, KNEXT, KEPILOGUE)
// picks scale word 2s into the low lane and 2s+1 into the high one from Y4
// (the half's 8 scales as int16 in both lanes).

// KLOSCALES(src): Y4 = the 8 scales of X-register src's low 8 bytes
// (signed), as int16 in both lanes.
#define KLOSCALES(src) \
	VPMOVSXBW src, X4; \
	VINSERTI128 $1, X4, Y4, Y4

// Q2KPART: part s (crumb shift sh, activations at x, shuffle at shuf) of
// the half whose 32 quant bytes are in Y1, into acc.
#define Q2KPART(sh, x, shuf, acc) \
	VPSRLW $sh, Y1, Y2; \
	VPAND Y15, Y2, Y2; \
	VPMADDUBSW x(DI), Y2, Y2; \
	VPSHUFB q6kShuf<>+shuf(SB), Y4, Y3; \
	MADDACC(Y2, Y3, acc)

// Q2KBLOCK (84 B: scales[16] with sc in the low nibble and m in the high,
// qs[64], d, dmin): d·xd·Σ_g sc_g·Σ q·x − dmin·xd·Σ_g m_g·bs_g.
#define Q2KBLOCK \
	MOVL 80(SI), AX; \
	VMOVD AX, X1; \
	VCVTPH2PS X1, X1; \
	VBROADCASTSS (R8), X2; \
	VMULPS X2, X1, X1; \
	VBROADCASTSS X1, Y13; \
	VMOVSHDUP X1, X3; \
	VBROADCASTSS X3, Y14; \
	VMOVDQU (SI), X1; \
	VPSRLW $4, X1, X2; \
	VPAND X12, X2, X2; \
	VPMOVZXBW X2, Y5; \
	VPMADDWD (R9), Y5, Y5; \
	VCVTDQ2PS Y5, Y5; \
	VFNMADD231PS Y5, Y14, Y0; \
	VPAND X12, X1, X6; \
	VPXOR Y7, Y7, Y7; \
	VPXOR Y8, Y8, Y8; \
	KLOSCALES(X6); \
	VMOVDQU 16(SI), Y1; \
	Q2KPART(0, 0, 0, Y7); \
	Q2KPART(2, 32, 32, Y8); \
	Q2KPART(4, 64, 64, Y7); \
	Q2KPART(6, 96, 96, Y8); \
	VPSRLDQ $8, X6, X6; \
	KLOSCALES(X6); \
	VMOVDQU 48(SI), Y1; \
	Q2KPART(0, 128, 0, Y7); \
	Q2KPART(2, 160, 32, Y8); \
	Q2KPART(4, 192, 64, Y7); \
	Q2KPART(6, 224, 96, Y8); \
	KSUM

// Q3KPART: Q2KPART with the third bit, bit hs of hmask byte l (Y9), as
// bit 2 of the quant: u = crumb + 4·bit in 0..7, the value u − 4.
#define Q3KPART(sh, hs, x, shuf, acc) \
	VPSRLW $sh, Y1, Y2; \
	VPAND Y15, Y2, Y2; \
	VPSRLW $hs, Y9, Y3; \
	VPAND Y10, Y3, Y3; \
	VPSLLW $2, Y3, Y3; \
	VPOR Y3, Y2, Y2; \
	VPMADDUBSW x(DI), Y2, Y2; \
	VPSHUFB q6kShuf<>+shuf(SB), Y4, Y3; \
	MADDACC(Y2, Y3, acc)

// Q3KBLOCK (110 B: hmask[32], qs[64], scales[12], d): d·xd·(Σ_g sc_g·Σ
// u·x − 4·Σ_g sc_g·bs_g). The 16 6-bit scales, minus 32: with A, B, C the
// little-endian dwords at 96, 100, 104, scales 0-3, 4-7, 8-11, 12-15 are
// the bytes of A, B, A>>4, B>>4 (& 0x0f) with C, C>>2, C>>4, C>>6 (& 3)
// as bits 4-5.
#define Q3KBLOCK \
	MOVWLZX 108(SI), AX; \
	VMOVD AX, X1; \
	VCVTPH2PS X1, X1; \
	VMULSS (R8), X1, X1; \
	VBROADCASTSS X1, Y13; \
	VMOVQ 96(SI), X1; \
	VPSRLD $4, X1, X2; \
	VPUNPCKLQDQ X2, X1, X1; \
	VPAND X12, X1, X1; \
	VPBROADCASTD 104(SI), X2; \
	VPSRLVD kloShift<>(SB), X2, X2; \
	VPAND X15, X2, X2; \
	VPSLLD $4, X2, X2; \
	VPOR X2, X1, X1; \
	VPSUBB X11, X1, X6; \
	VPMOVSXBW X6, Y5; \
	VPMADDWD (R9), Y5, Y5; \
	VPSLLD $2, Y5, Y5; \
	VPXOR Y7, Y7, Y7; \
	VPSUBD Y5, Y7, Y7; \
	VPXOR Y8, Y8, Y8; \
	VMOVDQU (SI), Y9; \
	KLOSCALES(X6); \
	VMOVDQU 32(SI), Y1; \
	Q3KPART(0, 0, 0, 0, Y7); \
	Q3KPART(2, 1, 32, 32, Y8); \
	Q3KPART(4, 2, 64, 64, Y7); \
	Q3KPART(6, 3, 96, 96, Y8); \
	VPSRLDQ $8, X6, X6; \
	KLOSCALES(X6); \
	VMOVDQU 64(SI), Y1; \
	Q3KPART(0, 4, 128, 0, Y7); \
	Q3KPART(2, 5, 160, 32, Y8); \
	Q3KPART(4, 6, 192, 64, Y7); \
	Q3KPART(6, 7, 224, 96, Y8); \
	KSUM

// KLOPROLOGUE: KPROLOGUE (the arguments, Y0 cleared, Y10 bytes of 1),
// then the byte masks: Y15 of 3 (KPROLOGUE's nibble mask, moved to Y12),
// Y11 of 32.
#define KLOPROLOGUE \
	KPROLOGUE; \
	VMOVDQA Y15, Y12; \
	VPSLLW $1, Y10, Y15; \
	VPOR Y10, Y15, Y15; \
	VPSLLW $5, Y10, Y11

// kloShift: Q3KBLOCK's shifts of C.
#define KLODATA \
DATA kloShift<>+0(SB)/8, $0x0000000200000000; \
DATA kloShift<>+8(SB)/8, $0x0000000600000004; \
GLOBL kloShift<>(SB), RODATA|NOPTR, $16
