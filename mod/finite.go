package mod

import (
	"errors"
	"fmt"
)

// ErrNonFinite is wrapped by the error of a forward pass whose logits hold
// a NaN or an infinity: a broken weight or an overflow. Every backend
// reports it the same way ("non-finite logits at token N"), never as an
// ordinary-looking token (the package modrun's contract).
var ErrNonFinite = errors.New("non-finite logits")

// NonFinite is the error for the logits of the token at position pos.
func NonFinite(pos int) error {
	return fmt.Errorf("%w at token %d (a NaN or an infinity in the weights or activations; modrun inspect --check FILE names non-finite weights)", ErrNonFinite, pos)
}

// Finite says whether every value of x is finite.
func Finite(x []float32) bool {
	for _, v := range x {
		if v-v != 0 { // NaN - NaN and Inf - Inf are NaN; a finite v gives 0
			return false
		}
	}
	return true
}
