// The K-quant dot products' blocks (kquant.go), shared by the AVX2 kernels
// (kquant_avx2_amd64.s) and the AVX-512 VNNI ones (kquant_vnni_amd64.s),
// which differ in MADDACC(p, s, acc): acc += p·s in int16 pairs summed to
// int32 (VPMADDWD and VPADDD, or VNNI's VPDPWSSD in one).
//
// Registers, for one row: SI the block, DI its 256 activations, R8 their
// scale, R9 their 16 sums; Y0 the float sum; Y15 the low-nibble mask.
// Each block leaves its terms in Y0 and clobbers Y1-Y10, Y13, Y14, AX,
// BX, DX, R10-R13. Its integer sums go to two or four accumulators (Y7-Y10)
// in turn, so that VPDPWSSD's latency overlaps.

// Q4KBLOCK: d·xd·Σ_j sc_j·Σ u·x − dmin·xd·Σ_j m_j·(bs_2j + bs_2j+1);
// Q4KSCALES its scales, its mins' term, and the integer sums cleared.
// The 6-bit scales and mins (scaleMinK4: bytes 0-3 scales 0-3, 4-7 mins
// 0-3, 8-11 the low nibbles of 4-7, whose top 2 bits are the spare bits
// of bytes 0-7) are unpacked in one register, as bytes: two shuffles put
// each byte's low part (k4Lo, masked by k4Mask, the high nibbles shifted
// down by 4 and masked by k4Nib) and top bits (k4Hi, shifted down by 2
// and masked to bits 4-5) in place, giving sc 0-7 then m 0-7; Y4 holds
// them in both 128-bit lanes, where q4kShuf picks scale j as an int16
// into every lane and k4Mins each min into both halves of a dword, so
// that VPMADDWD with the sums pairs them.
#define Q4KSCALES \
	MOVL (SI), AX; \
	VMOVD AX, X1; \
	VCVTPH2PS X1, X1; \
	VBROADCASTSS (R8), X2; \
	VMULPS X2, X1, X1; \
	VBROADCASTSS X1, Y13; \
	VMOVSHDUP X1, X3; \
	VBROADCASTSS X3, Y14; \
	VMOVDQU 4(SI), X4; \
	VPSHUFB k4Lo<>(SB), X4, X1; \
	VPSHUFB k4Hi<>(SB), X4, X2; \
	VPAND k4Mask<>(SB), X1, X3; \
	VPSRLW $4, X1, X1; \
	VPAND k4Nib<>(SB), X1, X1; \
	VPOR X3, X1, X1; \
	VPSRLW $2, X2, X2; \
	VPAND q6kHigh<>(SB), X2, X2; \
	VPOR X2, X1, X4; \
	VINSERTI128 $1, X4, Y4, Y4; \
	VPSHUFB k4Mins<>(SB), Y4, Y5; \
	VPMADDWD (R9), Y5, Y5; \
	VCVTDQ2PS Y5, Y5; \
	VFNMADD231PS Y5, Y14, Y0; \
	VPXOR Y7, Y7, Y7; \
	VPXOR Y8, Y8, Y8

// KSUM: the block's integer sums (Y7 + Y8) scaled by d·xd into Y0.
#define KSUM \
	VPADDD Y8, Y7, Y7; \
	VCVTDQ2PS Y7, Y7; \
	VFMADD231PS Y7, Y13, Y0

#define Q4KBLOCK \
	Q4KSCALES; \
	Q4KCHUNK(16, 0, 0); \
	Q4KCHUNK(48, 64, 64); \
	Q4KCHUNK(80, 128, 128); \
	Q4KCHUNK(112, 192, 192); \
	KSUM

// Q5KBLOCK: Q4KBLOCK with a fifth bit, bit j of qh byte l for element
// 32j+l (Y9 the 32 qh bytes, Y10 a byte mask of 1).
#define Q5KBLOCK \
	Q4KSCALES; \
	VMOVDQU 16(SI), Y9; \
	Q5KCHUNK(48, 0, 0, 0); \
	Q5KCHUNK(80, 64, 64, 2); \
	Q5KCHUNK(112, 128, 128, 4); \
	Q5KCHUNK(144, 192, 192, 6); \
	KSUM


// Q4KCHUNK: 64 elements, 32 bytes at qs(SI): low nibbles with the
// activations at x(DI) and scale 2k (shuffle at shuf), high nibbles with
// the next 32 and scale 2k+1.
#define Q4KCHUNK(qs, x, shuf) \
	VMOVDQU qs(SI), Y1; \
	VPAND Y15, Y1, Y2; \
	VPSRLW $4, Y1, Y1; \
	VPAND Y15, Y1, Y1; \
	VPMADDUBSW x(DI), Y2, Y2; \
	VPMADDUBSW x+32(DI), Y1, Y1; \
	VPSHUFB q4kShuf<>+shuf(SB), Y4, Y3; \
	MADDACC(Y2, Y3, Y7); \
	VPSHUFB q4kShuf<>+shuf+32(SB), Y4, Y3; \
	MADDACC(Y1, Y3, Y8)

// Q5KCHUNK: Q4KCHUNK with the fifth bits of sub-blocks 2k and 2k+1 (bit
// sh and sh+1 of Y9's bytes) moved to bit 4 of each quant.
#define Q5KCHUNK(qs, x, shuf, sh) \
	VMOVDQU qs(SI), Y1; \
	VPAND Y15, Y1, Y2; \
	VPSRLW $4, Y1, Y1; \
	VPAND Y15, Y1, Y1; \
	VPSRLW $sh, Y9, Y11; \
	VPAND Y10, Y11, Y12; \
	VPSLLW $4, Y12, Y12; \
	VPOR Y12, Y2, Y2; \
	VPSRLW $1, Y11, Y11; \
	VPAND Y10, Y11, Y11; \
	VPSLLW $4, Y11, Y11; \
	VPOR Y11, Y1, Y1; \
	VPMADDUBSW x(DI), Y2, Y2; \
	VPMADDUBSW x+32(DI), Y1, Y1; \
	VPSHUFB q4kShuf<>+shuf(SB), Y4, Y3; \
	MADDACC(Y2, Y3, Y7); \
	VPSHUFB q4kShuf<>+shuf+32(SB), Y4, Y3; \
	MADDACC(Y1, Y3, Y8)

// Q6KBLOCK: d·xd·(Σ_g sc_g·Σ u·x − 32·Σ_g sc_g·bs_g) with u = q+32 in
// 0..63 (VPMADDUBSW takes it unsigned). Per half of 128: ql bytes 0-31
// and 32-63 hold elements 0-31 and 32-63 in their low nibbles, 64-95 and
// 96-127 in their high ones; qh bytes 0-31 the top 2 bits at shifts 0,
// 2, 4, 6. Y4 holds 8 scales as int16 in both lanes; q6kShuf picks group
// 2k's into the low lane and 2k+1's into the high one.
#define Q6KBLOCK \
	MOVWLZX 208(SI), AX; \
	VMOVD AX, X1; \
	VCVTPH2PS X1, X1; \
	VMULSS (R8), X1, X1; \
	VBROADCASTSS X1, Y13; \
	VPMOVSXBW 192(SI), Y5; \
	VPMADDWD (R9), Y5, Y5; \
	VPSLLD $5, Y5, Y5; \
	VPXOR Y7, Y7, Y7; \
	VPSUBD Y5, Y7, Y7; \
	VPXOR Y8, Y8, Y8; \
	VPXOR Y9, Y9, Y9; \
	VPXOR Y10, Y10, Y10; \
	VPMOVSXBW 192(SI), X4; \
	VINSERTI128 $1, X4, Y4, Y4; \
	Q6KHALF(0, 128, 0); \
	VPMOVSXBW 200(SI), X4; \
	VINSERTI128 $1, X4, Y4, Y4; \
	Q6KHALF(64, 160, 128); \
	VPADDD Y8, Y7, Y7; \
	VPADDD Y10, Y9, Y9; \
	VPADDD Y9, Y7, Y7; \
	VCVTDQ2PS Y7, Y7; \
	VFMADD231PS Y7, Y13, Y0

#define Q6KHALF(ql, qh, x) \
	VMOVDQU qh(SI), Y14; \
	VMOVDQU ql(SI), Y1; \
	VPAND Y15, Y1, Y2; \
	VPSLLW $4, Y14, Y3; \
	Q6KPART(x, 0, Y7); \
	VMOVDQU ql+32(SI), Y1; \
	VPAND Y15, Y1, Y2; \
	VPSLLW $2, Y14, Y3; \
	Q6KPART(x+32, 32, Y8); \
	VMOVDQU ql(SI), Y1; \
	VPSRLW $4, Y1, Y2; \
	VPAND Y15, Y2, Y2; \
	VMOVDQA Y14, Y3; \
	Q6KPART(x+64, 64, Y9); \
	VMOVDQU ql+32(SI), Y1; \
	VPSRLW $4, Y1, Y2; \
	VPAND Y15, Y2, Y2; \
	VPSRLW $2, Y14, Y3; \
	Q6KPART(x+96, 96, Y10)

// Q6KPART: Y2 the low nibbles, Y3 the high bits at bits 4-5 (before the
// mask), x the activations' offset, shuf the scales' shuffle, acc the
// integer accumulator.
#define Q6KPART(x, shuf, acc) \
	VPAND q6kHigh<>(SB), Y3, Y3; \
	VPOR Y3, Y2, Y2; \
	VPMADDUBSW x(DI), Y2, Y2; \
	VPSHUFB q6kShuf<>+shuf(SB), Y4, Y3; \
	MADDACC(Y2, Y3, acc)

// The arguments, the float sum cleared, the nibble mask, Q5_K's bit mask
// (Y10, which Q6KBLOCK clobbers, but a row is of one type).
#define KPROLOGUE \
	MOVQ w+0(FP), SI; \
	MOVQ x+8(FP), DI; \
	MOVQ xd+16(FP), R8; \
	MOVQ bs+24(FP), R9; \
	MOVQ nk+32(FP), CX; \
	VXORPS Y0, Y0, Y0; \
	MOVL $0x0f0f0f0f, AX; \
	VMOVD AX, X15; \
	VPBROADCASTD X15, Y15; \
	MOVL $0x01010101, AX; \
	VMOVD AX, X10; \
	VPBROADCASTD X10, Y10

// The next block's activations, scale and sums.
#define KNEXT \
	ADDQ $256, DI; \
	ADDQ $4, R8; \
	ADDQ $32, R9; \
	DECQ CX

#define KEPILOGUE \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS X1, X0, X0; \
	VHADDPS X0, X0, X0; \
	VHADDPS X0, X0, X0; \
	VZEROUPPER; \
	MOVSS X0, ret+40(FP); \
	RET

// The shuffles (a static copy in each file that includes this one):
// q4kShuf, 32 bytes for each scale j, its byte as an int16 in every
// lane; k4Lo, k4Hi, k4Mask, k4Nib and k4Mins, Q4KSCALES's; q6kShuf,
// for each k of 4, word 2k in the low lane and 2k+1 in the high one;
// q6kHigh, Q6_K's high bits' mask.
DATA q4kShuf<>+0(SB)/8, $0x8000800080008000
DATA q4kShuf<>+8(SB)/8, $0x8000800080008000
DATA q4kShuf<>+16(SB)/8, $0x8000800080008000
DATA q4kShuf<>+24(SB)/8, $0x8000800080008000
DATA q4kShuf<>+32(SB)/8, $0x8001800180018001
DATA q4kShuf<>+40(SB)/8, $0x8001800180018001
DATA q4kShuf<>+48(SB)/8, $0x8001800180018001
DATA q4kShuf<>+56(SB)/8, $0x8001800180018001
DATA q4kShuf<>+64(SB)/8, $0x8002800280028002
DATA q4kShuf<>+72(SB)/8, $0x8002800280028002
DATA q4kShuf<>+80(SB)/8, $0x8002800280028002
DATA q4kShuf<>+88(SB)/8, $0x8002800280028002
DATA q4kShuf<>+96(SB)/8, $0x8003800380038003
DATA q4kShuf<>+104(SB)/8, $0x8003800380038003
DATA q4kShuf<>+112(SB)/8, $0x8003800380038003
DATA q4kShuf<>+120(SB)/8, $0x8003800380038003
DATA q4kShuf<>+128(SB)/8, $0x8004800480048004
DATA q4kShuf<>+136(SB)/8, $0x8004800480048004
DATA q4kShuf<>+144(SB)/8, $0x8004800480048004
DATA q4kShuf<>+152(SB)/8, $0x8004800480048004
DATA q4kShuf<>+160(SB)/8, $0x8005800580058005
DATA q4kShuf<>+168(SB)/8, $0x8005800580058005
DATA q4kShuf<>+176(SB)/8, $0x8005800580058005
DATA q4kShuf<>+184(SB)/8, $0x8005800580058005
DATA q4kShuf<>+192(SB)/8, $0x8006800680068006
DATA q4kShuf<>+200(SB)/8, $0x8006800680068006
DATA q4kShuf<>+208(SB)/8, $0x8006800680068006
DATA q4kShuf<>+216(SB)/8, $0x8006800680068006
DATA q4kShuf<>+224(SB)/8, $0x8007800780078007
DATA q4kShuf<>+232(SB)/8, $0x8007800780078007
DATA q4kShuf<>+240(SB)/8, $0x8007800780078007
DATA q4kShuf<>+248(SB)/8, $0x8007800780078007
GLOBL q4kShuf<>(SB), RODATA|NOPTR, $256

DATA k4Lo<>+0(SB)/8, $0x0b0a090803020100
DATA k4Lo<>+8(SB)/8, $0x0b0a090807060504
GLOBL k4Lo<>(SB), RODATA|NOPTR, $16
DATA k4Hi<>+0(SB)/8, $0x0302010080808080
DATA k4Hi<>+8(SB)/8, $0x0706050480808080
GLOBL k4Hi<>(SB), RODATA|NOPTR, $16
DATA k4Mask<>+0(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA k4Mask<>+8(SB)/8, $0x000000003f3f3f3f
GLOBL k4Mask<>(SB), RODATA|NOPTR, $16
DATA k4Nib<>+0(SB)/8, $0x0000000000000000
DATA k4Nib<>+8(SB)/8, $0x0f0f0f0f00000000
GLOBL k4Nib<>(SB), RODATA|NOPTR, $16

DATA k4Mins<>+0(SB)/8, $0x8009800980088008
DATA k4Mins<>+8(SB)/8, $0x800b800b800a800a
DATA k4Mins<>+16(SB)/8, $0x800d800d800c800c
DATA k4Mins<>+24(SB)/8, $0x800f800f800e800e
GLOBL k4Mins<>(SB), RODATA|NOPTR, $32

DATA q6kShuf<>+0(SB)/8, $0x0100010001000100
DATA q6kShuf<>+8(SB)/8, $0x0100010001000100
DATA q6kShuf<>+16(SB)/8, $0x0302030203020302
DATA q6kShuf<>+24(SB)/8, $0x0302030203020302
DATA q6kShuf<>+32(SB)/8, $0x0504050405040504
DATA q6kShuf<>+40(SB)/8, $0x0504050405040504
DATA q6kShuf<>+48(SB)/8, $0x0706070607060706
DATA q6kShuf<>+56(SB)/8, $0x0706070607060706
DATA q6kShuf<>+64(SB)/8, $0x0908090809080908
DATA q6kShuf<>+72(SB)/8, $0x0908090809080908
DATA q6kShuf<>+80(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q6kShuf<>+88(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q6kShuf<>+96(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q6kShuf<>+104(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q6kShuf<>+112(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA q6kShuf<>+120(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL q6kShuf<>(SB), RODATA|NOPTR, $128

DATA q6kHigh<>+0(SB)/8, $0x3030303030303030
DATA q6kHigh<>+8(SB)/8, $0x3030303030303030
DATA q6kHigh<>+16(SB)/8, $0x3030303030303030
DATA q6kHigh<>+24(SB)/8, $0x3030303030303030
GLOBL q6kHigh<>(SB), RODATA|NOPTR, $32

