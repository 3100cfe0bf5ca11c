#include "textflag.h"

// UDOTS for AVX-512 VNNI (with VL; the assembler encodes VPDPBUSD as
// EVEX, not AVX-VNNI's VEX): VPDPBUSD sums each 4 products of unsigned
// quants and signed activations into an int32 lane.
#define UDOTS \
	VPXOR Y4, Y4, Y4; \
	VPDPBUSD Y3, Y1, Y4; \
	VCVTDQ2PS Y4, Y4; \
	VPXOR Y5, Y5, Y5; \
	VPDPBUSD Y3, Y11, Y5; \
	VCVTDQ2PS Y5, Y5

#include "legacy_amd64.h"

LDATA

// func q41DotVNNI(w *byte, x *int8, xd *float32, nb int) float32
// A Q4_1 row of nb blocks dotted with Q8_0 activations (dotLegacyGo).
TEXT ·q41DotVNNI(SB), NOSPLIT, $0-36
	LPROLOGUE
q41VNNIloop:
	TESTQ CX, CX
	JZ    q41VNNIdone
	NIBBLES(4)
	SCALESDM
	LACC
	LNEXT(20)
	JMP   q41VNNIloop
q41VNNIdone:
	LEPILOGUE

// func q50DotVNNI(w *byte, x *int8, xd *float32, nb int) float32
// A Q5_0 row of nb blocks dotted with Q8_0 activations (dotLegacyGo).
TEXT ·q50DotVNNI(SB), NOSPLIT, $0-36
	LPROLOGUE
q50VNNIloop:
	TESTQ CX, CX
	JZ    q50VNNIdone
	NIBBLES(6)
	FIFTH(2)
	SCALESD16
	LACC
	LNEXT(22)
	JMP   q50VNNIloop
q50VNNIdone:
	LEPILOGUE

// func q51DotVNNI(w *byte, x *int8, xd *float32, nb int) float32
// A Q5_1 row of nb blocks dotted with Q8_0 activations (dotLegacyGo).
TEXT ·q51DotVNNI(SB), NOSPLIT, $0-36
	LPROLOGUE
q51VNNIloop:
	TESTQ CX, CX
	JZ    q51VNNIdone
	NIBBLES(8)
	FIFTH(4)
	SCALESDM
	LACC
	LNEXT(24)
	JMP   q51VNNIloop
q51VNNIdone:
	LEPILOGUE
