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

var (
	llamaOnce sync.Once
	llamaTok  *Tokenizer
)

const llamaVocabGGUF = "vocab/ggml-vocab-llama-spm.gguf"

// llamaVocab is the 32000-piece Llama 2 vocabulary, loaded once per run.
func llamaVocab(t testing.TB) *Tokenizer {
	t.Helper()
	sharedData(t, llamaVocabGGUF)
	llamaOnce.Do(func() { llamaTok = loadGGUF(t, llamaVocabGGUF) })
	require.NotNil(t, llamaTok, "loading %s failed earlier", llamaVocabGGUF)
	return llamaTok
}
