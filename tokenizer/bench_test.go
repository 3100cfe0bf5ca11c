package tokenizer

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const tinyStoriesV1 = "tinystories/TinyStories-train.head-2MiB.txt"

func readShared(b testing.TB, rel string) string {
	b.Helper()
	raw, err := os.ReadFile(sharedData(b, rel))
	require.NoError(b, err)
	return string(raw)
}

// noSpaceLine is n bytes of TinyStories text with all whitespace removed:
// one huge word, where every merge happens inside a single symbol list.
func noSpaceLine(tb testing.TB, n int) string {
	tb.Helper()
	text := strings.Join(strings.Fields(readShared(tb, tinyStoriesV1)), "")
	for len(text) < n {
		text += text
	}
	return strings.ToValidUTF8(text[:n], "") // the cut may split a character
}

// roundTrip checks the benchmark input before timing it.
func roundTrip(tb testing.TB, tok *Tokenizer, text string) int {
	tb.Helper()
	ids, err := tok.Encode(text, false)
	require.NoError(tb, err)
	back, err := tok.Decode(ids)
	require.NoError(tb, err)
	require.True(tb, bytes.Equal([]byte(text), back), "decode(encode(text)) differs from text")
	return len(ids)
}

func BenchmarkEncode(b *testing.B) { benchmarkEncode(b, llamaVocab(b)) }

// BenchmarkEncodeBPE is BenchmarkEncode with Llama 3's byte-level BPE.
func BenchmarkEncodeBPE(b *testing.B) { benchmarkEncode(b, llama3Vocab(b)) }

func benchmarkEncode(b *testing.B, tok *Tokenizer) {
	text := readShared(b, tinyStoriesV1)
	nTok := roundTrip(b, tok, text)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tok.Encode(text, true); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(nTok)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkEncodeNoSpaces times one line without spaces at two sizes; equal
// MB/s at 256 KiB and 1 MiB shows encoding is near-linear in the line length.
func BenchmarkEncodeNoSpaces(b *testing.B) {
	tok := llamaVocab(b)
	for _, size := range []struct {
		name string
		n    int
	}{{"256KiB", 256 << 10}, {"1MiB", 1 << 20}} {
		b.Run(size.name, func(b *testing.B) {
			text := noSpaceLine(b, size.n)
			roundTrip(b, tok, text)
			b.SetBytes(int64(len(text)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := tok.Encode(text, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	tok := llamaVocab(b)
	text := readShared(b, tinyStoriesV1)
	ids, err := tok.Encode(text, false)
	require.NoError(b, err)
	roundTrip(b, tok, text)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := tok.Decode(ids); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEncodeWorkIsLinear counts, without timing anything, the merge
// candidates queued for a 1 MiB line without spaces: each merge queues at
// most two new pairs, so the count must stay within a small multiple of the
// number of characters.
func TestEncodeWorkIsLinear(t *testing.T) {
	tok := llamaVocab(t)
	text := noSpaceLine(t, 1<<20)
	e := encoder{t: tok, text: tok.normalize(text)}
	ids, err := e.run(nil)
	require.NoError(t, err)
	require.NotEmpty(t, ids)
	chars := len(e.symbols)
	require.LessOrEqual(t, e.pushes, 3*chars, "queued %d pairs for %d characters", e.pushes, chars)
}
