package tokenizer

import "strings"

// ByteLevel writes bytes as a "gpt2" vocabulary's pieces hold them: each
// byte as GPT-2's printable stand-in character (a space is "Ġ", a newline
// "Ċ"). A program that makes such a vocabulary (mod/synth) names its
// pieces with it.
func ByteLevel(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		sb.WriteRune(byteChar[c])
	}
	return sb.String()
}
