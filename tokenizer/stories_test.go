package tokenizer

import (
	"os"
	"testing"

	"github.com/modrun/modrun/internal/shared"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStories260KDecode checks the 512-token llama2.c vocabulary against
// llama2.c's expected greedy output. llama2.c drops the leading space of the
// first piece after BOS and prints a newline at the end; the ids exclude BOS.
func TestStories260KDecode(t *testing.T) {
	tok := loadGGUF(t, "models/stories260K.gguf")
	require.Equal(t, 512, tok.NVocab())

	vec := shared.Stories260KGreedy(t)
	require.Equal(t, vec.BOS, tok.BOS())

	want, err := os.ReadFile(sharedData(t, "models/stories260K_greedy200_expected.txt"))
	require.NoError(t, err)

	got, err := tok.Decode(vec.IDs)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got)+"\n")

	withBOS, err := tok.Decode(append([]int32{vec.BOS}, vec.IDs...))
	require.NoError(t, err)
	assert.Equal(t, string(got), string(withBOS), "BOS decodes to nothing and keeps the space stripped")

	// The text the model produced re-encodes to the same ids: greedy output
	// of a BPE model is almost always in canonical segmentation; this one is.
	ids, err := tok.Encode(string(got), true)
	require.NoError(t, err)
	assert.Equal(t, append([]int32{vec.BOS}, vec.IDs...), ids)
}
