package modrun

import (
	"errors"
	"strings"
)

// stopMatcher applies GenerateOptions.Stop to one generation, as
// llama.cpp's and OpenAI's "stop" do: no stop string is ever shown, nor
// anything after it. It stands between the generation loop and fn. A new
// token whose text may begin a stop string is held back until the tokens
// after it say whether it does; when one is found, the tokens whose text
// starts before it go to fn (the last one's Text cut where it starts) and
// the generation ends (ErrStop). What is held at the end goes out in
// finish. With OnRouted, a held token's routing is set in its Routes
// before fn has it, so that OnRouted only hears of tokens fn had.
type stopMatcher struct {
	stops    []string
	fn       func(Token) error  // the caller's; may be nil
	onRouted func(int, []Route) // the caller's OnRouted; nil without
	held     []Token            // new tokens not given to fn yet
	text     string             // their text, in order
	last     int                // the position of the last new token fn had (-1: none)
	found    bool               // a stop string ended the generation
	fnDone   bool               // fn returned an error (ErrStop too): it is called no more
}

// withStops puts the matcher of opts.Stop between the generation and fn
// (and opts.OnRouted). Without stop strings it changes nothing and the
// matcher is nil, whose finish passes the result through.
func withStops(opts GenerateOptions, fn func(Token) error) (GenerateOptions, func(Token) error, *stopMatcher, error) {
	if len(opts.Stop) == 0 {
		return opts, fn, nil, nil
	}
	if _, _, err := opts.check(); err != nil { // a bad stop string among them, before it is used
		return opts, fn, nil, err
	}
	m := &stopMatcher{stops: opts.Stop, fn: fn, onRouted: opts.OnRouted, last: -1}
	if opts.OnRouted != nil && fn != nil { // without fn, Generate never calls OnRouted
		opts.OnRouted = m.routed
	} else {
		opts.OnRouted = nil
	}
	return opts, m.token, m, nil
}

// token is the generation's callback, in front of fn.
func (m *stopMatcher) token(t Token) error {
	if t.Prompt {
		return m.call(t)
	}
	m.held = append(m.held, t)
	m.text += t.Text
	cut, found := m.find(m.text)
	if !found {
		cut -= partialStop(m.text, m.stops)
	}
	return m.release(cut, found, false)
}

// routed is the generation's OnRouted, in front of the caller's: a held
// token's routing goes out with the token; a token dropped after a stop
// string's goes nowhere.
func (m *stopMatcher) routed(pos int, routes []Route) {
	for i := range m.held {
		if m.held[i].Pos == pos {
			m.held[i].Routes = routes
			return
		}
	}
	if pos <= m.last {
		m.onRouted(pos, routes)
	}
}

// find is where the first stop string starts in text, or len(text).
func (m *stopMatcher) find(text string) (cut int, found bool) {
	cut = len(text)
	for _, s := range m.stops {
		if i := strings.Index(text, s); i >= 0 && i < cut {
			cut, found = i, true
		}
	}
	return cut, found
}

// release gives fn the held tokens whose text starts before byte cut of
// the held text: with found (a stop string starts at cut), the last one
// cut short, and then ErrStop; without, only those that end by cut (all
// of them when final).
func (m *stopMatcher) release(cut int, found, final bool) error {
	n, end := 0, 0
	for ; n < len(m.held); n++ {
		next := end + len(m.held[n].Text)
		if !(final && !found) && (end >= cut || (!found && next > cut)) {
			break
		}
		end = next
	}
	out := m.held[:n:n]
	m.held, m.text = m.held[n:], m.text[end:]
	if found {
		m.found, m.held, m.text = true, nil, ""
	}
	for i, t := range out {
		if found && i == len(out)-1 {
			t.Text = t.Text[:len(t.Text)-(end-cut)]
		}
		m.last = t.Pos
		if err := m.call(t); err != nil {
			return err
		}
	}
	if found {
		return ErrStop
	}
	return nil
}

// call gives fn one token, unless fn has ended the generation before.
func (m *stopMatcher) call(t Token) error {
	if m.fn == nil || m.fnDone {
		return nil
	}
	err := m.fn(t)
	m.fnDone = err != nil
	return err
}

// finish ends the generation that returned (res, err): the held tokens go
// to fn, and res.Tail through the matcher as well (unless fn ended it
// itself); res.Stop is StopString when a stop string ended it.
func (m *stopMatcher) finish(res Result, err error) (Result, error) {
	if m == nil {
		return res, err
	}
	switch {
	case m.found: // during the generation: the text the decoder held is after it
		res.Tail = ""
	case !m.fnDone:
		held := len(m.text)
		cut, found := m.find(m.text + res.Tail)
		ferr := m.release(min(cut, held), found && cut < held, true)
		if found {
			m.found, res.Tail = true, res.Tail[:max(cut-held, 0)]
		}
		if err == nil && ferr != nil && !errors.Is(ferr, ErrStop) {
			err = ferr
		}
	}
	if m.found && err == nil {
		res.Stop = StopString
	}
	return res, err
}

// partialStop is the length of text's longest end that begins some stop
// string (and so must wait for the next token).
func partialStop(text string, stops []string) int {
	longest := 0
	for _, s := range stops {
		for k := min(len(s)-1, len(text)); k > longest; k-- {
			if strings.HasSuffix(text, s[:k]) {
				longest = k
				break
			}
		}
	}
	return longest
}
