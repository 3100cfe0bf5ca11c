#include "textflag.h"

// MADDACC for AVX2: VPMADDWD, then VPADDD.
#define MADDACC(p, s, acc) VPMADDWD s, p, p; VPADDD p, acc, acc

#include "kquant_amd64.h"

// func q4kDotAVX2(w *byte, x *int8, xd *float32, bs *int16, nk int) float32
// A Q4_K row of nk blocks dotted with Q8_K activations (dotKGo).
TEXT ·q4kDotAVX2(SB), NOSPLIT, $0-44
	KPROLOGUE
q4kAVX2loop:
	TESTQ CX, CX
	JZ    q4kAVX2done
	Q4KBLOCK
	ADDQ $144, SI
	KNEXT
	JMP  q4kAVX2loop
q4kAVX2done:
	KEPILOGUE

// func q6kDotAVX2(w *byte, x *int8, xd *float32, bs *int16, nk int) float32
// A Q6_K row of nk blocks dotted with Q8_K activations (dotKGo).
TEXT ·q6kDotAVX2(SB), NOSPLIT, $0-44
	KPROLOGUE
q6kAVX2loop:
	TESTQ CX, CX
	JZ    q6kAVX2done
	Q6KBLOCK
	ADDQ $210, SI
	KNEXT
	JMP  q6kAVX2loop
q6kAVX2done:
	KEPILOGUE

// func q5kDotAVX2(w *byte, x *int8, xd *float32, bs *int16, nk int) float32
// A Q5_K row of nk blocks dotted with Q8_K activations (dotKGo).
TEXT ·q5kDotAVX2(SB), NOSPLIT, $0-44
	KPROLOGUE
q5kAVX2loop:
	TESTQ CX, CX
	JZ    q5kAVX2done
	Q5KBLOCK
	ADDQ $176, SI
	KNEXT
	JMP  q5kAVX2loop
q5kAVX2done:
	KEPILOGUE

// func quantizeKAVX2(q *int8, d *float32, bs *int16, x *float32, nk int)
// quantizeK: per block of 256, d = max|x|/127 (NaN for a block holding a
// NaN or an infinity, as quantizeAVX2 finds it), q = x·(127/max|x|)
// rounded to nearest even, and bs the sums of each 16 q.
TEXT ·quantizeKAVX2(SB), NOSPLIT, $0-40
	MOVQ q+0(FP), DI
	MOVQ d+8(FP), R8
	MOVQ bs+16(FP), R9
	MOVQ x+24(FP), SI
	MOVQ nk+32(FP), CX
	MOVL $0x7fffffff, AX
	MOVD AX, X15
	VPBROADCASTD X15, Y15 // |x| mask
	MOVL $0x42fe0000, AX  // 127.0
	MOVD AX, X14
	VMOVDQU packOrderK<>(SB), Y13
	MOVL $0x01010101, AX
	MOVD AX, X12
	VPBROADCASTD X12, Y12 // bytes of 1
	VPCMPEQW Y11, Y11, Y11
	VPSRLW $15, Y11, Y11  // int16 ones

qkBlock:
	TESTQ CX, CX
	JZ    qkDone
	VPXOR Y4, Y4, Y4
	XORQ  BX, BX

qkMax:
	VANDPS (SI)(BX*1), Y15, Y5 // |x| as bits, maxed as integers (quantizeAVX2)
	VPMAXSD Y5, Y4, Y4
	VANDPS 32(SI)(BX*1), Y15, Y5
	VPMAXSD Y5, Y4, Y4
	VANDPS 64(SI)(BX*1), Y15, Y5
	VPMAXSD Y5, Y4, Y4
	VANDPS 96(SI)(BX*1), Y15, Y5
	VPMAXSD Y5, Y4, Y4
	ADDQ $128, BX
	CMPQ BX, $1024
	JLT  qkMax
	VEXTRACTF128 $1, Y4, X5
	VPMAXSD X5, X4, X4
	VMOVHLPS X4, X4, X5
	VPMAXSD X5, X4, X4
	VPSHUFD $1, X4, X5
	VPMAXSD X5, X4, X4
	VSUBSS X4, X4, X5
	VADDSS X5, X4, X4 // NaN for a block that is not finite
	VDIVSS X14, X4, X5
	VMOVSS X5, (R8)
	VXORPS X6, X6, X6
	VCMPSS $4, X6, X4, X7
	VDIVSS X4, X14, X6
	VANDPS X7, X6, X6
	VBROADCASTSS X6, Y6
	XORQ BX, BX

qkQuant:
	VMULPS (SI), Y6, Y0
	VMULPS 32(SI), Y6, Y1
	VMULPS 64(SI), Y6, Y2
	VMULPS 96(SI), Y6, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y13, Y0
	VMOVDQU Y0, (DI)
	VPMADDUBSW Y0, Y12, Y1 // pairs of q
	VPMADDWD Y11, Y1, Y1   // quads
	VPHADDD Y1, Y1, Y1
	VPHADDD Y1, Y1, Y1     // each 128-bit lane's sum: 16 q
	VMOVD X1, AX
	MOVW AX, (R9)
	VEXTRACTI128 $1, Y1, X1
	VMOVD X1, AX
	MOVW AX, 2(R9)
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $4, R9
	ADDQ $1, BX
	CMPQ BX, $8
	JLT  qkQuant
	ADDQ $4, R8
	DECQ CX
	JMP  qkBlock

qkDone:
	VZEROUPPER
	RET

// packOrderK is kernels_avx2_amd64.s's packOrder (a static copy).
DATA packOrderK<>+0(SB)/4, $0
DATA packOrderK<>+4(SB)/4, $4
DATA packOrderK<>+8(SB)/4, $1
DATA packOrderK<>+12(SB)/4, $5
DATA packOrderK<>+16(SB)/4, $2
DATA packOrderK<>+20(SB)/4, $6
DATA packOrderK<>+24(SB)/4, $3
DATA packOrderK<>+28(SB)/4, $7
GLOBL packOrderK<>(SB), RODATA|NOPTR, $32
