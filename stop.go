package modrun

import "strings"

// StopText cuts streamed text at the first of its stop strings, as
// llama.cpp's and OpenAI's "stop" do: no stop string is ever shown. Text
// that could be the start of one is held back until the next chunk says
// whether it is. Feed it the generated tokens' Text in order, then Flush.
type StopText struct {
	stops []string
	held  string
	found bool
}

// NewStopText watches for stops (empty strings are ignored).
func NewStopText(stops []string) *StopText {
	s := &StopText{}
	for _, stop := range stops {
		if stop != "" {
			s.stops = append(s.stops, stop)
		}
	}
	return s
}

// Push takes the next chunk of text. It returns what can be shown now and
// whether a stop string has been found: then the text before it is all
// that is returned, and later chunks give nothing.
func (s *StopText) Push(text string) (string, bool) {
	if s.found {
		return "", true
	}
	buf := s.held + text
	s.held = ""
	first := -1
	for _, stop := range s.stops {
		if i := strings.Index(buf, stop); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first >= 0 {
		s.found = true
		return buf[:first], true
	}
	keep := 0 // the longest end of buf that begins a stop string
	for _, stop := range s.stops {
		for n := min(len(stop)-1, len(buf)); n > keep; n-- {
			if strings.HasSuffix(buf, stop[:n]) {
				keep = n
				break
			}
		}
	}
	s.held = buf[len(buf)-keep:]
	return buf[:len(buf)-keep], false
}

// Flush returns the text held back when the generation ended without a
// stop string.
func (s *StopText) Flush() string {
	out := s.held
	s.held = ""
	return out
}
