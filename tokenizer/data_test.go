package tokenizer

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/shared"
)

// sharedData returns the path of a shared data file, skipping the test
// when it is absent.
func sharedData(t testing.TB, rel string) string {
	t.Helper()
	return shared.Path(t, rel)
}

// loadGGUF builds a tokenizer from a GGUF in the shared data directory.
func loadGGUF(t testing.TB, rel string) *Tokenizer {
	t.Helper()
	f, err := gguf.Open(sharedData(t, rel))
	require.NoError(t, err)
	defer f.Close()
	tok, err := FromGGUF(f)
	require.NoError(t, err)
	return tok
}

// cachedVocab loads a shared vocabulary once per test run.
type cachedVocab struct {
	rel  string
	once sync.Once
	tok  *Tokenizer
}

func (c *cachedVocab) get(t testing.TB) *Tokenizer {
	t.Helper()
	sharedData(t, c.rel)
	c.once.Do(func() { c.tok = loadGGUF(t, c.rel) })
	require.NotNil(t, c.tok, "loading %s failed earlier", c.rel)
	return c.tok
}

const (
	llamaVocabGGUF  = "vocab/ggml-vocab-llama-spm.gguf"
	llama3VocabGGUF = "vocab/ggml-vocab-llama-bpe.gguf"
)

var llamaCache, llama3Cache = cachedVocab{rel: llamaVocabGGUF}, cachedVocab{rel: llama3VocabGGUF}

// llamaVocab is the 32000-piece Llama 2 vocabulary.
func llamaVocab(t testing.TB) *Tokenizer { return llamaCache.get(t) }

// llama3Vocab is Llama 3's 128256-token byte-level BPE vocabulary.
func llama3Vocab(t testing.TB) *Tokenizer { return llama3Cache.get(t) }
