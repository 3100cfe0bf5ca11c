#include "textflag.h"

// MADDACC for AVX-512 VNNI (with VL): VPDPWSSD.
#define MADDACC(p, s, acc) VPDPWSSD s, p, acc

#include "kquant_amd64.h"
#include "klow_amd64.h"

KLODATA

// func q2kDotVNNI(w *byte, x *int8, xd *float32, bs *int16, nk int) float32
// A Q2_K row of nk blocks dotted with Q8_K activations (dotKGo).
TEXT ·q2kDotVNNI(SB), NOSPLIT, $0-44
	KLOPROLOGUE
q2kVNNIloop:
	TESTQ CX, CX
	JZ    q2kVNNIdone
	Q2KBLOCK
	ADDQ $84, SI
	KNEXT
	JMP  q2kVNNIloop
q2kVNNIdone:
	KEPILOGUE

// func q3kDotVNNI(w *byte, x *int8, xd *float32, bs *int16, nk int) float32
// A Q3_K row of nk blocks dotted with Q8_K activations (dotKGo).
TEXT ·q3kDotVNNI(SB), NOSPLIT, $0-44
	KLOPROLOGUE
q3kVNNIloop:
	TESTQ CX, CX
	JZ    q3kVNNIdone
	Q3KBLOCK
	ADDQ $110, SI
	KNEXT
	JMP  q3kVNNIloop
q3kVNNIdone:
	KEPILOGUE
