package modrun

import (
	"fmt"

	"github.com/modrun/modrun/tokenizer"
)

// TokenizeWith is Tokenize, with special-token text such as "<|eot_id|>"
// read as those tokens when parseSpecial is true (as
// GenerateOptions.ParseSpecial reads a prompt). A text that starts with
// BOS itself gets no second one.
func (m *Model) TokenizeWith(text string, bos, parseSpecial bool) ([]int32, error) {
	if m.isClosed() {
		return nil, ErrClosed
	}
	return m.tok.EncodeWith(text, tokenizer.EncodeOptions{AddSpecial: bos, ParseSpecial: parseSpecial})
}

// plural is "1 thread", "2 threads".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
