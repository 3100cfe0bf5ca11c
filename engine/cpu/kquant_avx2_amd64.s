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
