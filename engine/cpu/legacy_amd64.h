// The block bodies of the Q4_1, Q5_0 and Q5_1 row kernels (legacy.go),
// shared by legacy_avx2_amd64.s and legacy_vnni_amd64.s, which define
// UDOTS: Y4 = float(Σ u·x), Y5 = float(Σ x) per lane, from the unsigned
// quants Y1 and the activations Y3 (Y11 bytes of 1).
//
// Registers: SI the block, DI its 32 activations, R9 their scale, CX the
// blocks left; Y0 and Y10 the sums; Y7 int16 ones; Y8 bytes of 0x0f, Y12 fifthShuf, Y13 fifthBit,
// Y14 bytes of 0x10, X15 −16.0.

// LPROLOGUE loads the arguments of func(w *byte, x *int8, xd *float32, nb int) float32
// and the constants.
#define LPROLOGUE \
	MOVQ w+0(FP), SI; \
	MOVQ x+8(FP), DI; \
	MOVQ xd+16(FP), R9; \
	MOVQ nb+24(FP), CX; \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y10, Y10, Y10; \
	VPCMPEQW Y7, Y7, Y7; \
	VPSRLW $15, Y7, Y7; \
	MOVL $0x0f0f0f0f, AX; \
	VMOVD AX, X8; \
	VPBROADCASTD X8, Y8; \
	MOVL $0x01010101, AX; \
	VMOVD AX, X11; \
	VPBROADCASTD X11, Y11; \
	VMOVDQU fifthShuf<>(SB), Y12; \
	VMOVDQU fifthBit<>(SB), Y13; \
	VPSLLW $4, Y11, Y14; \
	MOVL $0xc1800000, AX; \
	VMOVD AX, X15

// NIBBLES(off): Y1 = the block's 32 nibbles (qs at off), element j in
// byte j: bytes 0-15 the low halves, 16-31 the high.
#define NIBBLES(off) \
	VMOVDQU off(SI), X1; \
	VPSRLW $4, X1, X2; \
	VINSERTI128 $1, X2, Y1, Y1; \
	VPAND Y8, Y1, Y1

// FIFTH(off): bit j of qh (at off) becomes bit 4 of Y1's byte j: byte j
// of the broadcast qh is qh's byte j/8 (VPSHUFB within each 128-bit lane,
// both holding qh), tested against 1 << j%8.
#define FIFTH(off) \
	VPBROADCASTD off(SI), Y2; \
	VPSHUFB Y12, Y2, Y2; \
	VPAND Y13, Y2, Y2; \
	VPCMPEQB Y13, Y2, Y2; \
	VPAND Y14, Y2, Y2; \
	VPOR Y2, Y1, Y1

// SCALESDM: Y6 = xd·d, Y9 = xd·m (the halves d, m at 0 and 2).
#define SCALESDM \
	VMOVD (SI), X6; \
	VCVTPH2PS X6, X6; \
	VBROADCASTSS (R9), X9; \
	VMULPS X9, X6, X6; \
	VMOVSHDUP X6, X9; \
	VBROADCASTSS X6, Y6; \
	VBROADCASTSS X9, Y9

// SCALESD16: Y6 = xd·d, Y9 = −16·xd·d (Q5_0: the half d at 0).
#define SCALESD16 \
	MOVWLZX (SI), AX; \
	VMOVD AX, X6; \
	VCVTPH2PS X6, X6; \
	VMULSS (R9), X6, X6; \
	VMULSS X15, X6, X9; \
	VBROADCASTSS X6, Y6; \
	VBROADCASTSS X9, Y9

// LACC adds the block: Y0 += Y6·Y4, Y10 += Y9·Y5 (two sums, so that
// each waits on one FMA a block, not two).
#define LACC \
	VMOVDQU (DI), Y3; \
	UDOTS; \
	VFMADD231PS Y4, Y6, Y0; \
	VFMADD231PS Y5, Y9, Y10

// LNEXT steps to the next block of bytes b.
#define LNEXT(b) \
	ADDQ $b, SI; \
	ADDQ $32, DI; \
	ADDQ $4, R9; \
	DECQ CX

// LEPILOGUE returns Y0's and Y10's lanes summed.
#define LEPILOGUE \
	VADDPS Y10, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS X1, X0, X0; \
	VHADDPS X0, X0, X0; \
	VHADDPS X0, X0, X0; \
	VZEROUPPER; \
	MOVSS X0, ret+32(FP); \
	RET

// LDATA defines the file's fifthShuf (byte j: j/8) and fifthBit (byte j:
// 1 << j%8).
#define LDATA \
DATA fifthShuf<>+0(SB)/8, $0x0000000000000000; \
DATA fifthShuf<>+8(SB)/8, $0x0101010101010101; \
DATA fifthShuf<>+16(SB)/8, $0x0202020202020202; \
DATA fifthShuf<>+24(SB)/8, $0x0303030303030303; \
GLOBL fifthShuf<>(SB), RODATA|NOPTR, $32; \
DATA fifthBit<>+0(SB)/8, $0x8040201008040201; \
DATA fifthBit<>+8(SB)/8, $0x8040201008040201; \
DATA fifthBit<>+16(SB)/8, $0x8040201008040201; \
DATA fifthBit<>+24(SB)/8, $0x8040201008040201; \
GLOBL fifthBit<>(SB), RODATA|NOPTR, $32
