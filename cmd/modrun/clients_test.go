package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What users of llama.cpp's CLI type works on modrun's (issue 45).

// --presence-penalty and --frequency-penalty (llama.cpp's names) change a
// greedy story the way llama.cpp's do, and a value outside OpenAI's range
// is refused naming the flag.
func TestPenaltyFlags(t *testing.T) {
	base := []string{"-m", shippedMoD, "-p", "Once upon a time", "-n", "60", "--backend", "cpu"}
	code, plain, stderr := modrun(t, base...)
	require.Equal(t, 0, code, stderr)
	code, pen, stderr := modrun(t, append(base, "--presence-penalty", "2", "--frequency-penalty", "2")...)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, shiny rock in the park. She wanted to see what was in\n", plain)
	assert.Equal(t, "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw something strange happened and down it went up!\n\"\n", pen)
	code, out, stderr := modrun(t, append(base, "--frequency-penalty", "3")...)
	assert.Equal(t, 2, code)
	assert.Empty(t, out)
	assert.Equal(t, "modrun run: usage: --frequency-penalty 3: must be in [-2, 2] (0 = off)\n", stderr)
}
