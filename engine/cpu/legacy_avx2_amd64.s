#include "textflag.h"

// UDOTS for AVX2: VPMADDUBSW (unsigned quants times signed activations,
// pairs summed to int16: at most 2·31·128, no saturation), then VPMADDWD
// by ones to int32.
#define UDOTS \
	VPMADDUBSW Y3, Y1, Y4; \
	VPMADDWD Y7, Y4, Y4; \
	VCVTDQ2PS Y4, Y4; \
	VPMADDUBSW Y3, Y11, Y5; \
	VPMADDWD Y7, Y5, Y5; \
	VCVTDQ2PS Y5, Y5

#include "legacy_amd64.h"

LDATA

// func q41DotAVX2(w *byte, x *int8, xd *float32, nb int) float32
// A Q4_1 row of nb blocks dotted with Q8_0 activations (dotLegacyGo).
TEXT ·q41DotAVX2(SB), NOSPLIT, $0-36
	LPROLOGUE
q41AVX2loop:
	TESTQ CX, CX
	JZ    q41AVX2done
	NIBBLES(4)
	SCALESDM
	LACC
	LNEXT(20)
	JMP   q41AVX2loop
q41AVX2done:
	LEPILOGUE

// func q50DotAVX2(w *byte, x *int8, xd *float32, nb int) float32
// A Q5_0 row of nb blocks dotted with Q8_0 activations (dotLegacyGo).
TEXT ·q50DotAVX2(SB), NOSPLIT, $0-36
	LPROLOGUE
q50AVX2loop:
	TESTQ CX, CX
	JZ    q50AVX2done
	NIBBLES(6)
	FIFTH(2)
	SCALESD16
	LACC
	LNEXT(22)
	JMP   q50AVX2loop
q50AVX2done:
	LEPILOGUE

// func q51DotAVX2(w *byte, x *int8, xd *float32, nb int) float32
// A Q5_1 row of nb blocks dotted with Q8_0 activations (dotLegacyGo).
TEXT ·q51DotAVX2(SB), NOSPLIT, $0-36
	LPROLOGUE
q51AVX2loop:
	TESTQ CX, CX
	JZ    q51AVX2done
	NIBBLES(8)
	FIFTH(4)
	SCALESDM
	LACC
	LNEXT(24)
	JMP   q51AVX2loop
q51AVX2done:
	LEPILOGUE
