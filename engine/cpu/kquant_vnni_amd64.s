#include "textflag.h"

// MADDACC for AVX-512 VNNI (with VL): VPDPWSSD.
#define MADDACC(p, s, acc) VPDPWSSD s, p, acc

#include "kquant_amd64.h"


// func q4kDotVNNI(w *byte, x *int8, xd *float32, bs *int16, nk int) float32
// A Q4_K row of nk blocks dotted with Q8_K activations (dotKGo).
TEXT ·q4kDotVNNI(SB), NOSPLIT, $0-44
	KPROLOGUE
q4kVNNIloop:
	TESTQ CX, CX
	JZ    q4kVNNIdone
	Q4KBLOCK
	ADDQ $144, SI
	KNEXT
	JMP  q4kVNNIloop
q4kVNNIdone:
	KEPILOGUE

// func q6kDotVNNI(w *byte, x *int8, xd *float32, bs *int16, nk int) float32
// A Q6_K row of nk blocks dotted with Q8_K activations (dotKGo).
TEXT ·q6kDotVNNI(SB), NOSPLIT, $0-44
	KPROLOGUE
q6kVNNIloop:
	TESTQ CX, CX
	JZ    q6kVNNIdone
	Q6KBLOCK
	ADDQ $210, SI
	KNEXT
	JMP  q6kVNNIloop
q6kVNNIdone:
	KEPILOGUE

// func q5kDotVNNI(w *byte, x *int8, xd *float32, bs *int16, nk int) float32
// A Q5_K row of nk blocks dotted with Q8_K activations (dotKGo).
TEXT ·q5kDotVNNI(SB), NOSPLIT, $0-44
	KPROLOGUE
q5kVNNIloop:
	TESTQ CX, CX
	JZ    q5kVNNIdone
	Q5KBLOCK
	ADDQ $176, SI
	KNEXT
	JMP  q5kVNNIloop
q5kVNNIdone:
	KEPILOGUE
