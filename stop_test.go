package modrun_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/modrun/modrun"
)

// TestStopText streams text a few bytes at a time: a stop string split
// over chunks is never shown, nor anything after it; text that only looked
// like the start of one comes out once it is clear it is not.
func TestStopText(t *testing.T) {
	cases := []struct {
		stops  []string
		chunks []string
		want   string
		found  bool
	}{
		{[]string{"\n\n"}, []string{"Once", " upon\n", "\nThe end"}, "Once upon", true},
		{[]string{"END", "</s>"}, []string{"a <", "/", "b> c</", "s> d"}, "a </b> c", true},
		{[]string{"END"}, []string{"the EN", "D"}, "the ", true},
		{[]string{"END"}, []string{"the EN", "d"}, "the ENd", false},
		{[]string{"END"}, []string{"the E"}, "the E", false},               // Flush gives the held "E"
		{[]string{"lo", "hello"}, []string{"say hel", "lo"}, "say ", true}, // the earliest stop wins,
		{nil, []string{"a", "b"}, "ab", false},
	}
	for _, c := range cases {
		s := modrun.NewStopText(c.stops)
		got, found := "", false
		for _, chunk := range c.chunks {
			out, f := s.Push(chunk)
			got += out
			found = found || f
		}
		if !found {
			got += s.Flush()
		}
		assert.Equal(t, c.want, got, "%q in %q", c.stops, c.chunks)
		assert.Equal(t, c.found, found, "%q in %q", c.stops, c.chunks)
	}
}
