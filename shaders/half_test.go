package shaders

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/require"
)

// halfCases are f32 values whose rounding to a half (IEEE binary16, to
// nearest, ties to even) a wrong conversion gets wrong: exact ties between
// two halves with an even and an odd lower neighbour and an f32 ulp either
// side of them, in the normal range and among the subnormals (steps of
// 2^-24 below 2^-14, 2^-25 itself a tie that goes to zero); mantissas that
// carry into the next power of two; the largest half, the last value that
// rounds to it and the first that rounds to infinity (65520); infinities, a
// NaN, signed zeros, f32 subnormals; and random values of every exponent a
// half can hold and a few past. Almost none is a half already, so a kernel
// whose rounding a compiler folded away (unpackHalf2x16(packHalf2x16(x))
// to x, as NVIDIA's does) returns them unchanged and fails.
func halfCases() []float32 {
	pow2 := func(e int) float64 { return math.Ldexp(1, e) }
	var xs []float64
	around := func(v float64) { // v and an f32 ulp either side, both signs
		f := float32(v)
		for _, x := range []float32{f, math.Nextafter32(f, 0), math.Nextafter32(f, float32(math.Inf(1)))} {
			xs = append(xs, float64(x), -float64(x))
		}
	}
	// Normal halves: (1024 + m) · 2^(e-10); the tie above is + 0.5 step.
	for e := -14; e <= 15; e++ {
		for _, m := range []int{0, 1, 2, 3, 511, 512, 1022, 1023} {
			around((1024 + float64(m) + 0.5) * pow2(e-10))
		}
	}
	// Subnormal halves: k · 2^-24; the tie above is (k + 0.5) · 2^-24.
	for _, k := range []int{0, 1, 2, 3, 4, 5, 100, 101, 511, 512, 1021, 1022, 1023} {
		around((float64(k) + 0.5) * pow2(-24))
		around(float64(k) * pow2(-24))
	}
	around(pow2(-14)) // the smallest normal half
	around(pow2(-26))
	for _, v := range []float64{65504, 65519, 65519.996, 65520, 65536, 1e6, 3e38, 1.0 / 3, math.Pi, 0.1} {
		around(v)
	}
	f32s := make([]float32, 0, len(xs)+1040)
	for _, x := range xs {
		f32s = append(f32s, float32(x))
	}
	f32s = append(f32s, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(1), math.Float32frombits(0x80000001), math.Float32frombits(0x007FFFFF), // f32 subnormals
		float32(pow2(-126)))
	rng := rand.New(rand.NewSource(46))
	for len(f32s)%1024 != 0 {
		e := -27 + rng.Intn(45) // 2^-27 .. 2^17: zero, subnormal, normal, infinite halves
		f := math.Ldexp(1+rng.Float64(), e)
		if rng.Intn(2) == 0 {
			f = -f
		}
		f32s = append(f32s, float32(f))
	}
	return f32s
}

// halfMismatches compares got with x rounded by Go's conversion
// (gguf.F32ToF16, to nearest even): equal values (either zero for a zero),
// or NaN for NaN. It describes the mismatches, the first few with their
// input, or returns "".
func halfMismatches(x, got []float32) string {
	var sb strings.Builder
	bad := 0
	for i := range x {
		want := gguf.F16ToF32(gguf.F32ToF16(x[i]))
		if got[i] == want || (math.IsNaN(float64(want)) && math.IsNaN(float64(got[i]))) {
			continue
		}
		if bad < 8 {
			fmt.Fprintf(&sb, "  x %.9g (%#08x): got %.9g, the half is %.9g\n", x[i], math.Float32bits(x[i]), got[i], want)
		}
		bad++
	}
	if bad == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d values not rounded to the nearest half (ties to even):\n%s", bad, len(x), sb.String())
}

// TestToHalf checks toHalf (include/common.glsl), value for value against
// Go's conversion, in each kernel that uses it, as that kernel's compiled
// code runs on this device (a compiler folds or keeps a rounding where it
// is used, so each use is tested):
//   - matmul_coop's emulated tile product (EMULATE_COOPMAT), which stages X
//     and W as halves: with one column and W = [1], y[s] = toHalf(x[s]) · 1
//     summed with the tile's zero padding, exactly;
//   - split_halves (the COOP_XSPLIT matmuls' X): the high half is x
//     rounded, the low half x minus it rounded;
//   - decode_attend's and decode_attend_keys's own value with an F16 cache, on an empty cache: the
//     token attends to itself alone (softmax weight exp(0) = 1), so its
//     output is its value as the cache will hold it, exactly.
//
// On lavapipe both pass; with the rounding taken out of toHalf (return x)
// both fail (checked by hand when the test was written).
func TestToHalf(t *testing.T) {
	dev := openDevice(t)
	x := halfCases()

	t.Run("matmul_coop_emulated", func(t *testing.T) {
		v, err := Lookup(MatmulCoopName(matvecTypeOf[gguf.TypeF32], true))
		require.NoError(t, err)
		for _, spec := range []MatmulCoopSpec{MatmulCoopSpecGPU, {BM: 16, BN: 16, BK: 16, WM: 16, WN: 16}} {
			require.NoError(t, spec.Check())
			k := newKernel(t, dev, v, spec.Constants()...)
			c := &matmulCase{typ: gguf.TypeF32, rows: 1, cols: 1, n: len(x), w: f32bytes([]float32{1}), x: x}
			got := c.runParts(t, dev, k, matmulCoopGroupsOf(spec), nil, false)
			if msg := halfMismatches(x, got); msg != "" {
				t.Errorf("%+v: %s", spec, msg)
			}
		}
	})

	// split_halves: each word's high half is x rounded, its low half x
	// minus that (exact in f32) rounded, both as Go rounds them.
	t.Run(SplitHalvesName, func(t *testing.T) {
		k := newKernel(t, dev, lookup(t, SplitHalvesName))
		bx, out := newBuffer(t, dev, f32bytes(x)), denseNaNBuffer(t, dev, len(x))
		rec := dev.NewRecorder()
		defer rec.Close()
		recordSplitHalves(rec, k, bx, out, uint32(len(x)))
		require.NoError(t, dev.Run(rec))
		words := downloadU32(t, out, len(x))
		hi, lo, rest := make([]float32, len(x)), make([]float32, len(x)), make([]float32, len(x))
		for i, w := range words {
			hi[i], lo[i] = gguf.F16ToF32(uint16(w)), gguf.F16ToF32(uint16(w>>16))
			rest[i] = x[i] - gguf.F16ToF32(gguf.F32ToF16(x[i]))
		}
		if msg := halfMismatches(x, hi); msg != "" {
			t.Errorf("the high halves: %s", msg)
		}
		if msg := halfMismatches(rest, lo); msg != "" {
			t.Errorf("the low halves: %s", msg)
		}
	})

	for _, kern := range decodeAttendKernels {
		t.Run(kern.name(KVF16), func(t *testing.T) {
			const nHead, hd, splits = 8, 128, 4 // a chunk of 1024 values a dispatch
			qd := nHead * hd
			kOff, vOff := qd, 2*qd // one kv head per head: head h outputs its own value
			k := newKernel(t, dev, lookup(t, kern.name(KVF16)), kern.spec(hd, splits)...)
			freqs := ropeTable(t, hd, "llama3.2+linear4")
			bFreq := newBuffer(t, dev, u32bytes(RopeFreqs(freqs)))
			var got []float32
			for at := 0; at < len(x); at += qd {
				qkv := make([]float32, 3*qd) // q and k zero: every score 0
				copy(qkv[vOff:], x[at:at+qd])
				words := qd / 2
				bK, bV := decodeBuffer(t, dev, nil, words), decodeBuffer(t, dev, nil, words)
				bKPos := newBuffer(t, dev, u32bytes([]uint32{0}))
				bCounts := newBuffer(t, dev, u32bytes([]uint32{0}))
				bPart := denseNaNBuffer(t, dev, nHead*splits*(2+hd))
				bDone := newBuffer(t, dev, u32bytes(make([]uint32, DecodeAttendDoneWords(nHead))))
				bQKV, bPos := newBuffer(t, dev, f32bytes(qkv)), newBuffer(t, dev, u32bytes([]uint32{0}))
				out := denseNaNBuffer(t, dev, qd)
				rec := dev.NewRecorder()
				push, binds := withHandoff(t, dev, k, vk.MustPackPush(DecodeAttendPush{HeadDim: hd, NHead: nHead, NKVHead: nHead, KOff: uint32(kOff), VOff: uint32(vOff),
					MaxEntries: 1, Scale: float32(1 / math.Sqrt(hd))}),
					DecodeAttendGroups(nHead, splits), decodeAttendBinds(bQKV, bPos, bFreq, bK, bV, bKPos, bCounts, bPart, bDone, out))
				rec.Dispatch(k, push, DecodeAttendGroups(nHead, splits), binds...)
				require.NoError(t, dev.Run(rec))
				rec.Close()
				got = append(got, download(t, out, qd)...)
				// The appended value is the same half, through packHalf2x16.
				if msg := halfMismatches(x[at:at+qd], kvDecode(t, KVF16, downloadU32(t, bV, words))); msg != "" {
					t.Errorf("the appended values: %s", msg)
				}
			}
			if msg := halfMismatches(x, got); msg != "" {
				t.Errorf("the output: %s", msg)
			}
		})
	}
}
