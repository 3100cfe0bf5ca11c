#include "textflag.h"

// MADDACC for AVX2: VPMADDWD, then VPADDD.
#define MADDACC(p, s, acc) VPMADDWD s, p, p; VPADDD p, acc, acc

#include "kquant_amd64.h"
#include "klow_amd64.h"

KLODATA

// func q2kDotAVX2(w *byte, x *int8, xd *float32, bs *int16, nk int) float32
// A Q2_K row of nk blocks dotted with Q8_K activations (dotKGo).
TEXT ·q2kDotAVX2(SB), NOSPLIT, $0-44
	KLOPROLOGUE
q2kAVX2loop:
	TESTQ CX, CX
	JZ    q2kAVX2done
	Q2KBLOCK
	ADDQ $84, SI
	KNEXT
	JMP  q2kAVX2loop
q2kAVX2done:
	KEPILOGUE

// func q3kDotAVX2(w *byte, x *int8, xd *float32, bs *int16, nk int) float32
// A Q3_K row of nk blocks dotted with Q8_K activations (dotKGo).
TEXT ·q3kDotAVX2(SB), NOSPLIT, $0-44
	KLOPROLOGUE
q3kAVX2loop:
	TESTQ CX, CX
	JZ    q3kAVX2done
	Q3KBLOCK
	ADDQ $110, SI
	KNEXT
	JMP  q3kAVX2loop
q3kAVX2done:
	KEPILOGUE
