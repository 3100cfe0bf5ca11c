#include "textflag.h"

// The AVX2 kernels of an F16 KV cache (kvcache.go): f32ScoresAVX2 and
// f32MixAVX2 (kernels_avx2_amd64.s) with each key or value row widened
// from halves by F16C's VCVTPH2PS as it is loaded, so a cache of halves is
// read at half the bytes and the arithmetic is the float kernels', product
// for product; and VCVTPS2PH, the rounding of rows to halves as they are
// written.

// func f16ScoresAVX2(q *float32, k *uint16, stride, m, hd int, scale float32, out *float32)
// out[e] = scale · q[0:hd]·k[e·stride : e·stride+hd] for e < m, the keys
// halves; hd a multiple of 8, stride in halves. As f32ScoresAVX2: four
// keys at a time (DI, R8, R9, R13) clamped to the last key, BX walking q
// in bytes and R12 the keys (half as far).
TEXT ·f16ScoresAVX2(SB), NOSPLIT, $0-56
	MOVQ q+0(FP), SI
	MOVQ k+8(FP), DI
	MOVQ stride+16(FP), R10
	SHLQ $1, R10
	MOVQ m+24(FP), CX
	MOVQ hd+32(FP), R11
	SHRQ $3, R11
	VBROADCASTSS scale+40(FP), X13
	MOVQ out+48(FP), AX

scoreQuad:
	TESTQ CX, CX
	JZ    scoreDone
	MOVQ  DI, R8
	MOVQ  DI, R9
	MOVQ  DI, R13
	CMPQ  CX, $2
	JLT   scoreKeys
	ADDQ  R10, R8
	MOVQ  R8, R9
	MOVQ  R8, R13
	CMPQ  CX, $3
	JLT   scoreKeys
	ADDQ  R10, R9
	MOVQ  R9, R13
	CMPQ  CX, $4
	JLT   scoreKeys
	ADDQ  R10, R13

scoreKeys:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ   R11, DX
	XORQ   BX, BX
	XORQ   R12, R12

scoreLoop:
	VMOVUPS     (SI)(BX*1), Y4
	VCVTPH2PS   (DI)(R12*1), Y5
	VFMADD231PS Y5, Y4, Y0
	VCVTPH2PS   (R8)(R12*1), Y6
	VFMADD231PS Y6, Y4, Y1
	VCVTPH2PS   (R9)(R12*1), Y7
	VFMADD231PS Y7, Y4, Y2
	VCVTPH2PS   (R13)(R12*1), Y8
	VFMADD231PS Y8, Y4, Y3
	ADDQ        $32, BX
	ADDQ        $16, R12
	DECQ        DX
	JNZ         scoreLoop
	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VMULPS       X13, X0, X0
	CMPQ         CX, $4
	JLT          scoreTail
	VMOVUPS      X0, (AX)
	ADDQ         $16, AX
	LEAQ         (DI)(R10*4), DI
	SUBQ         $4, CX
	JMP          scoreQuad

scoreTail:
	VMOVSS     X0, (AX)
	CMPQ       CX, $2
	JLT        scoreDone
	VEXTRACTPS $1, X0, 4(AX)
	CMPQ       CX, $3
	JLT        scoreDone
	VEXTRACTPS $2, X0, 8(AX)

scoreDone:
	VZEROUPPER
	RET

// func f16MixAVX2(out *float32, v *uint16, stride, m, hd int, p *float32)
// out[0:hd] = Σ_e p[e]·v[e·stride : e·stride+hd] for e < m, the values
// halves; hd a multiple of 8, stride in halves. As f32MixAVX2: the output
// in pieces of 4, 2, then 1 vectors, even and odd keys in two sums. R8 is
// the piece's offset in out's bytes, R13 in v's (half of it).
TEXT ·f16MixAVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), SI
	MOVQ stride+16(FP), R10
	SHLQ $1, R10
	MOVQ hd+32(FP), R11
	SHLQ $2, R11
	XORQ R8, R8

mixPiece:
	MOVQ   R11, R12
	SUBQ   R8, R12
	JZ     mixDone
	MOVQ   v+8(FP), DI
	MOVQ   R8, R13
	SHRQ   $1, R13
	ADDQ   R13, DI
	MOVQ   p+40(FP), AX
	MOVQ   m+24(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	CMPQ   R12, $128
	JGE    mix4
	CMPQ   R12, $64
	JGE    mix2

mix1:
	CMPQ         CX, $2
	JLT          mix1last
	VBROADCASTSS (AX), Y8
	VBROADCASTSS 4(AX), Y9
	VCVTPH2PS    (DI), Y10
	VFMADD231PS  Y10, Y8, Y0
	VCVTPH2PS    (DI)(R10*1), Y11
	VFMADD231PS  Y11, Y9, Y4
	LEAQ         (DI)(R10*2), DI
	ADDQ         $8, AX
	SUBQ         $2, CX
	JMP          mix1

mix1last:
	TESTQ        CX, CX
	JZ           mix1store
	VBROADCASTSS (AX), Y8
	VCVTPH2PS    (DI), Y10
	VFMADD231PS  Y10, Y8, Y0

mix1store:
	VADDPS  Y4, Y0, Y0
	VMOVUPS Y0, (SI)(R8*1)
	ADDQ    $32, R8
	JMP     mixPiece

mix2:
	CMPQ         CX, $2
	JLT          mix2last
	VBROADCASTSS (AX), Y8
	VBROADCASTSS 4(AX), Y9
	VCVTPH2PS    (DI), Y10
	VFMADD231PS  Y10, Y8, Y0
	VCVTPH2PS    16(DI), Y11
	VFMADD231PS  Y11, Y8, Y1
	VCVTPH2PS    (DI)(R10*1), Y12
	VFMADD231PS  Y12, Y9, Y4
	VCVTPH2PS    16(DI)(R10*1), Y13
	VFMADD231PS  Y13, Y9, Y5
	LEAQ         (DI)(R10*2), DI
	ADDQ         $8, AX
	SUBQ         $2, CX
	JMP          mix2

mix2last:
	TESTQ        CX, CX
	JZ           mix2store
	VBROADCASTSS (AX), Y8
	VCVTPH2PS    (DI), Y10
	VFMADD231PS  Y10, Y8, Y0
	VCVTPH2PS    16(DI), Y11
	VFMADD231PS  Y11, Y8, Y1

mix2store:
	VADDPS  Y4, Y0, Y0
	VADDPS  Y5, Y1, Y1
	VMOVUPS Y0, (SI)(R8*1)
	VMOVUPS Y1, 32(SI)(R8*1)
	ADDQ    $64, R8
	JMP     mixPiece

mix4:
	CMPQ         CX, $2
	JLT          mix4last
	VBROADCASTSS (AX), Y8
	VBROADCASTSS 4(AX), Y9
	VCVTPH2PS    (DI), Y10
	VFMADD231PS  Y10, Y8, Y0
	VCVTPH2PS    16(DI), Y11
	VFMADD231PS  Y11, Y8, Y1
	VCVTPH2PS    32(DI), Y12
	VFMADD231PS  Y12, Y8, Y2
	VCVTPH2PS    48(DI), Y13
	VFMADD231PS  Y13, Y8, Y3
	VCVTPH2PS    (DI)(R10*1), Y10
	VFMADD231PS  Y10, Y9, Y4
	VCVTPH2PS    16(DI)(R10*1), Y11
	VFMADD231PS  Y11, Y9, Y5
	VCVTPH2PS    32(DI)(R10*1), Y12
	VFMADD231PS  Y12, Y9, Y6
	VCVTPH2PS    48(DI)(R10*1), Y13
	VFMADD231PS  Y13, Y9, Y7
	LEAQ         (DI)(R10*2), DI
	ADDQ         $8, AX
	SUBQ         $2, CX
	JMP          mix4

mix4last:
	TESTQ        CX, CX
	JZ           mix4store
	VBROADCASTSS (AX), Y8
	VCVTPH2PS    (DI), Y10
	VFMADD231PS  Y10, Y8, Y0
	VCVTPH2PS    16(DI), Y11
	VFMADD231PS  Y11, Y8, Y1
	VCVTPH2PS    32(DI), Y12
	VFMADD231PS  Y12, Y8, Y2
	VCVTPH2PS    48(DI), Y13
	VFMADD231PS  Y13, Y8, Y3

mix4store:
	VADDPS  Y4, Y0, Y0
	VADDPS  Y5, Y1, Y1
	VADDPS  Y6, Y2, Y2
	VADDPS  Y7, Y3, Y3
	VMOVUPS Y0, (SI)(R8*1)
	VMOVUPS Y1, 32(SI)(R8*1)
	VMOVUPS Y2, 64(SI)(R8*1)
	VMOVUPS Y3, 96(SI)(R8*1)
	ADDQ    $128, R8
	JMP     mixPiece

mixDone:
	VZEROUPPER
	RET

// func f32ToF16AVX2(dst *uint16, src *float32, n int)  (n a multiple of 8)
// Rounds to the nearest half, ties to even (imm8 0), as gguf.F32ToF16.
TEXT ·f32ToF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX

halfLoop:
	TESTQ     CX, CX
	JZ        halfDone
	VMOVUPS   (SI), Y1
	VCVTPS2PH $0, Y1, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	DECQ      CX
	JMP       halfLoop

halfDone:
	VZEROUPPER
	RET
