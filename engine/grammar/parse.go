// Package grammar constrains generation to a formal language: GBNF as
// llama.cpp writes it, compiled to a grammar over bytes, a recognizer that
// keeps llama.cpp's pushdown stacks, and the mask of a vocabulary's tokens
// whose bytes keep the text inside the language (a trie over the tokens'
// bytes, so that one step walks the vocabulary once). JSON schemas compile
// to GBNF (schema.go).
//
// Character classes and literals are compiled to UTF-8 byte sequences, so
// the recognizer sees bytes only: a token that ends inside a character
// (a byte-fallback <0xNN> token, or a byte-level BPE piece that splits a
// multi-byte letter) leaves the stacks inside that character's sequence,
// with nothing special to do.
package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits on what Parse accepts, so that a hostile grammar (a server's
// request) costs bounded memory: x{0,100000} would expand to 100000 rules.
const (
	maxSource     = 1 << 20 // bytes of GBNF text
	maxRepeat     = 1000    // the largest m or n of x{m,n}
	maxElements   = 1 << 20 // elements of the compiled grammar
	maxNestedness = 200     // nested parentheses
)

// A Grammar is a compiled grammar: immutable, shared by every sequence
// that generates under it (each has its own Matcher).
type Grammar struct {
	code  []elem    // every alternative's elements, each alternative ended by an end element
	alts  [][]int32 // alts[r]: the code positions where rule r's alternatives start
	terms []byteSet // the byte sets of the terminal elements
	names []string  // rule names, for errors
	root  int32
	src   string
}

// String is the grammar's GBNF source.
func (g *Grammar) String() string { return g.src }

type elemKind uint8

const (
	elemEnd  elemKind = iota // the end of an alternative
	elemTerm                 // one byte of terms[arg]
	elemRef                  // rule arg
)

type elem struct {
	kind elemKind
	arg  int32
}

// byteSet is a set of bytes, 256 bits.
type byteSet [4]uint64

func (s *byteSet) add(lo, hi byte) {
	for b := int(lo); b <= int(hi); b++ {
		s[b>>6] |= 1 << (b & 63)
	}
}

func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }

// builder collects rules while parsing: each rule a list of alternatives,
// each alternative a list of elements whose terminals index terms.
type builder struct {
	src     string
	rules   [][][]elem
	names   []string
	byName  map[string]int32
	defined []bool
	terms   []byteSet
	termIdx map[byteSet]int32
	size    int
}

// Parse compiles GBNF text (llama.cpp's grammar format: rules
// `name ::= ...`, alternation |, grouping ( ), the postfixes ? * + {m}
// {m,} {m,n} {,n}, literals "..." and character classes [...] with the
// escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH, ranges a-z and
// negation [^...], any character ., and # comments). The grammar starts at
// the rule named root. Errors name the line and column.
func Parse(src string) (*Grammar, error) {
	if len(src) > maxSource {
		return nil, fmt.Errorf("grammar: %d bytes of GBNF, more than the %d accepted", len(src), maxSource)
	}
	if !utf8.ValidString(src) {
		return nil, fmt.Errorf("grammar: the GBNF text is not valid UTF-8")
	}
	b := &builder{src: src, byName: map[string]int32{}, termIdx: map[byteSet]int32{}}
	p := &parser{b: b, s: src}
	if err := p.grammar(); err != nil {
		return nil, err
	}
	return b.compile()
}

type parser struct {
	b     *builder
	s     string
	pos   int
	depth int
}

// errorf is an error at the parser's position, as line:column.
func (p *parser) errorf(format string, args ...any) error {
	line := 1 + strings.Count(p.s[:p.pos], "\n")
	col := p.pos - strings.LastIndexByte(p.s[:p.pos], '\n')
	return fmt.Errorf("grammar: line %d column %d: %s", line, col, fmt.Sprintf(format, args...))
}

func (p *parser) peek() byte {
	if p.pos < len(p.s) {
		return p.s[p.pos]
	}
	return 0
}

// space skips blanks and comments, and newlines when newlineOK (inside
// parentheses, after ::= and |: elsewhere a newline ends a rule).
func (p *parser) space(newlineOK bool) {
	for p.pos < len(p.s) {
		switch c := p.s[p.pos]; {
		case c == ' ' || c == '\t':
			p.pos++
		case c == '#':
			for p.pos < len(p.s) && p.s[p.pos] != '\n' && p.s[p.pos] != '\r' {
				p.pos++
			}
		case newlineOK && (c == '\n' || c == '\r'):
			p.pos++
		default:
			return
		}
	}
}

func isNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func (p *parser) name() string {
	start := p.pos
	for p.pos < len(p.s) && isNameChar(p.s[p.pos]) {
		p.pos++
	}
	return p.s[start:p.pos]
}

func (p *parser) grammar() error {
	p.space(true)
	for p.pos < len(p.s) {
		if err := p.rule(); err != nil {
			return err
		}
		p.space(true)
	}
	return nil
}

func (p *parser) rule() error {
	name := p.name()
	if name == "" {
		return p.errorf("expected a rule name, found %q", p.rest())
	}
	p.space(false)
	if !strings.HasPrefix(p.s[p.pos:], "::=") {
		return p.errorf("expected ::= after the rule name %q", name)
	}
	p.pos += 3
	p.space(true)
	id := p.b.ruleID(name)
	if p.b.defined[id] {
		return p.errorf("rule %q is defined twice", name)
	}
	p.b.defined[id] = true
	alts, err := p.alternates(name, false)
	if err != nil {
		return err
	}
	p.b.rules[id] = alts
	switch c := p.peek(); c {
	case 0, '\n', '\r':
		return nil
	default:
		return p.errorf("expected the end of rule %q, found %q", name, p.rest())
	}
}

// rest is a short quote of the text at the parser's position.
func (p *parser) rest() string {
	r := p.s[p.pos:]
	if len(r) > 12 {
		r = r[:12] + "..."
	}
	return r
}

func (p *parser) alternates(name string, nested bool) ([][]elem, error) {
	var alts [][]elem
	for {
		seq, err := p.sequence(name, nested)
		if err != nil {
			return nil, err
		}
		alts = append(alts, seq)
		if p.peek() != '|' {
			return alts, nil
		}
		p.pos++
		p.space(true)
	}
}

// sequence parses elements until |, ), or (outside parentheses) a newline.
func (p *parser) sequence(name string, nested bool) ([]elem, error) {
	var seq []elem
	last := -1 // where the last item (a literal, class, group or reference) starts in seq
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		start := len(seq)
		switch {
		case c == '"':
			p.pos++
			lit, err := p.literal()
			if err != nil {
				return nil, err
			}
			for i := 0; i < len(lit); i++ {
				var s byteSet
				s.add(lit[i], lit[i])
				seq = append(seq, p.b.term(s))
			}
			last = start
		case c == '[':
			p.pos++
			ranges, err := p.class()
			if err != nil {
				return nil, err
			}
			seq = append(seq, p.b.charRule(name, ranges))
			last = start
		case c == '.':
			p.pos++
			seq = append(seq, p.b.charRule(name, []runeRange{{0, utf8.MaxRune}}))
			last = start
		case c == '(':
			p.pos++
			if p.depth++; p.depth > maxNestedness {
				return nil, p.errorf("parentheses nested more than %d deep", maxNestedness)
			}
			p.space(true)
			alts, err := p.alternates(name, true)
			if err != nil {
				return nil, err
			}
			if p.peek() != ')' {
				return nil, p.errorf("expected ) to close the group")
			}
			p.pos++
			p.depth--
			seq = append(seq, p.b.newRule(name, alts))
			last = start
		case isNameChar(c):
			ref := p.name()
			seq = append(seq, elem{kind: elemRef, arg: p.b.ruleID(ref)})
			last = start
		case c == '*' || c == '+' || c == '?' || c == '{':
			if last < 0 {
				return nil, p.errorf("%q follows nothing it could repeat", c)
			}
			lo, hi, err := p.repetition()
			if err != nil {
				return nil, err
			}
			item := append([]elem(nil), seq[last:]...)
			seq = append(seq[:last], p.b.repeat(name, item, lo, hi)...)
			last = -1
		case c == '<':
			return nil, p.errorf("token references <...> are not supported; write the token's text as a literal")
		default:
			return seq, nil
		}
		if p.b.size += len(seq) - start; p.b.size > maxElements {
			return nil, p.errorf("the grammar expands to more than %d elements", maxElements)
		}
		p.space(nested)
	}
	return seq, nil
}

// repetition parses a postfix: lo and hi counts, hi < 0 for no bound.
func (p *parser) repetition() (lo, hi int, err error) {
	c := p.s[p.pos]
	p.pos++
	switch c {
	case '*':
		return 0, -1, nil
	case '+':
		return 1, -1, nil
	case '?':
		return 0, 1, nil
	}
	p.space(false)
	num := func() (int, bool, error) {
		start := p.pos
		for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
			p.pos++
		}
		if start == p.pos {
			return 0, false, nil
		}
		n, err := strconv.Atoi(p.s[start:p.pos])
		if err != nil || n > maxRepeat {
			return 0, false, p.errorf("repetition count %s: at most %d", p.s[start:p.pos], maxRepeat)
		}
		p.space(false)
		return n, true, nil
	}
	lo, haveLo, err := num()
	if err != nil {
		return 0, 0, err
	}
	hi = lo
	if p.peek() == ',' {
		p.pos++
		p.space(false)
		var haveHi bool
		if hi, haveHi, err = num(); err != nil {
			return 0, 0, err
		}
		if !haveHi {
			hi = -1
		}
	} else if !haveLo {
		return 0, 0, p.errorf("expected a count in {m,n}")
	}
	if p.peek() != '}' {
		return 0, 0, p.errorf("expected } to close the repetition")
	}
	p.pos++
	if hi >= 0 && hi < lo {
		return 0, 0, p.errorf("repetition {%d,%d}: the maximum is below the minimum", lo, hi)
	}
	return lo, hi, nil
}

// literal parses the rest of a "..." literal and returns its UTF-8 bytes.
func (p *parser) literal() (string, error) {
	var out []byte
	for {
		if p.pos >= len(p.s) {
			return "", p.errorf("unterminated literal")
		}
		c := p.s[p.pos]
		if c == '"' {
			p.pos++
			return string(out), nil
		}
		r, err := p.char()
		if err != nil {
			return "", err
		}
		out = utf8.AppendRune(out, r)
	}
}

type runeRange struct{ lo, hi rune }

// class parses the rest of a [...] class into code point ranges (negated
// ones complemented here).
func (p *parser) class() ([]runeRange, error) {
	negate := p.peek() == '^'
	if negate {
		p.pos++
	}
	var ranges []runeRange
	for {
		if p.pos >= len(p.s) {
			return nil, p.errorf("unterminated character class")
		}
		if p.s[p.pos] == ']' {
			p.pos++
			break
		}
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.peek() == '-' && p.pos+1 < len(p.s) && p.s[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errorf("character range %q-%q is backwards", lo, hi)
			}
		}
		ranges = append(ranges, runeRange{lo, hi})
	}
	ranges = normalize(ranges)
	if negate {
		ranges = complement(ranges)
	}
	return ranges, nil
}

// char parses one character of a literal or class, escapes included.
func (p *parser) char() (rune, error) {
	c := p.s[p.pos]
	if c != '\\' {
		r, n := utf8.DecodeRuneInString(p.s[p.pos:])
		p.pos += n
		return r, nil
	}
	p.pos++
	if p.pos >= len(p.s) {
		return 0, p.errorf("a backslash ends the text")
	}
	e := p.s[p.pos]
	p.pos++
	switch e {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-', '^', '/', '\'':
		return rune(e), nil
	case 'x':
		return p.hex(2)
	case 'u':
		return p.hex(4)
	case 'U':
		return p.hex(8)
	}
	p.pos -= 2
	return 0, p.errorf("unknown escape \\%c", e)
}

func (p *parser) hex(n int) (rune, error) {
	if p.pos+n > len(p.s) {
		return 0, p.errorf("expected %d hex digits", n)
	}
	v, err := strconv.ParseUint(p.s[p.pos:p.pos+n], 16, 32)
	if err != nil {
		return 0, p.errorf("expected %d hex digits, found %q", n, p.s[p.pos:p.pos+n])
	}
	p.pos += n
	if v > utf8.MaxRune || v >= 0xD800 && v <= 0xDFFF {
		return 0, p.errorf("escape U+%X is not a Unicode scalar value", v)
	}
	return rune(v), nil
}

func (b *builder) ruleID(name string) int32 {
	if id, ok := b.byName[name]; ok {
		return id
	}
	id := int32(len(b.rules))
	b.byName[name] = id
	b.rules = append(b.rules, nil)
	b.names = append(b.names, name)
	b.defined = append(b.defined, false)
	return id
}

// newRule adds an anonymous rule (a group, a repetition, a class) named
// after the rule it appears in, and returns a reference to it.
func (b *builder) newRule(parent string, alts [][]elem) elem {
	id := int32(len(b.rules))
	b.rules = append(b.rules, alts)
	b.names = append(b.names, fmt.Sprintf("%s-%d", parent, id))
	b.defined = append(b.defined, true)
	for _, a := range alts {
		b.size += len(a) + 1
	}
	return elem{kind: elemRef, arg: id}
}

func (b *builder) term(s byteSet) elem {
	id, ok := b.termIdx[s]
	if !ok {
		id = int32(len(b.terms))
		b.terms = append(b.terms, s)
		b.termIdx[s] = id
	}
	return elem{kind: elemTerm, arg: id}
}

// charRule is a rule matching one character of ranges, as UTF-8 bytes:
// one alternative per byte-range sequence (utf8.go).
func (b *builder) charRule(parent string, ranges []runeRange) elem {
	var alts [][]elem
	var ascii byteSet
	haveASCII := false
	for _, seq := range utf8Sequences(ranges) {
		if len(seq) == 1 { // the one-byte sequences share a terminal
			ascii.add(seq[0].lo, seq[0].hi)
			haveASCII = true
			continue
		}
		alt := make([]elem, len(seq))
		for i, r := range seq {
			var s byteSet
			s.add(r.lo, r.hi)
			alt[i] = b.term(s)
		}
		alts = append(alts, alt)
	}
	if haveASCII {
		alts = append([][]elem{{b.term(ascii)}}, alts...)
	}
	if len(alts) == 1 && len(alts[0]) == 1 {
		return alts[0][0]
	}
	if len(alts) == 0 { // an empty class, [^\x00-\U0010FFFF]: matches nothing
		return b.newRule(parent, [][]elem{{b.term(byteSet{})}})
	}
	return b.newRule(parent, alts)
}

// repeat expands item{lo,hi} as llama.cpp does: lo copies, then a
// right-recursive rule for an open end, or hi-lo nested optionals.
func (b *builder) repeat(parent string, item []elem, lo, hi int) []elem {
	var out []elem
	for i := 0; i < lo; i++ {
		out = append(out, item...)
	}
	if hi < 0 { // star ::= item star | ε
		id := int32(len(b.rules))
		b.rules = append(b.rules, nil)
		b.names = append(b.names, fmt.Sprintf("%s-%d", parent, id))
		b.defined = append(b.defined, true)
		b.rules[id] = [][]elem{append(append([]elem(nil), item...), elem{kind: elemRef, arg: id}), {}}
		b.size += len(item) + 3
		return append(out, elem{kind: elemRef, arg: id})
	}
	if hi == lo {
		return out
	}
	// opt_k ::= item opt_{k-1} | ε, opt_1 ::= item | ε
	var inner []elem
	for k := 0; k < hi-lo; k++ {
		alt := append(append([]elem(nil), item...), inner...)
		inner = []elem{b.newRule(parent, [][]elem{alt, {}})}
	}
	return append(out, inner...)
}

// compile checks the rules (all defined, a root, no left recursion) and
// lays them out flat.
func (b *builder) compile() (*Grammar, error) {
	root, ok := b.byName["root"]
	if !ok {
		return nil, fmt.Errorf("grammar: no rule named root (the start of the grammar)")
	}
	for id, def := range b.defined {
		if !def {
			return nil, fmt.Errorf("grammar: rule %q is used but never defined", b.names[id])
		}
	}
	if err := b.checkLeftRecursion(); err != nil {
		return nil, err
	}
	g := &Grammar{alts: make([][]int32, len(b.rules)), terms: b.terms, names: b.names, root: root, src: b.src}
	for id, alts := range b.rules {
		for _, a := range alts {
			g.alts[id] = append(g.alts[id], int32(len(g.code)))
			g.code = append(g.code, a...)
			g.code = append(g.code, elem{kind: elemEnd})
		}
	}
	return g, nil
}

// checkLeftRecursion refuses a rule that can reach itself without
// consuming a byte (a ::= a "x", or (x?)*): the recognizer's expansion of
// its stacks would never end. llama.cpp refuses them too.
func (b *builder) checkLeftRecursion() error {
	n := len(b.rules)
	nullable := make([]bool, n)
	for changed := true; changed; {
		changed = false
		for id, alts := range b.rules {
			if nullable[id] {
				continue
			}
			for _, a := range alts {
				if b.allNullable(a, nullable) {
					nullable[id], changed = true, true
					break
				}
			}
		}
	}
	// first[r]: the rules r can start with, without consuming a byte.
	first := make([][]int32, n)
	for id, alts := range b.rules {
		for _, a := range alts {
			for _, e := range a {
				if e.kind != elemRef {
					break
				}
				first[id] = append(first[id], e.arg)
				if !nullable[e.arg] {
					break
				}
			}
		}
	}
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]uint8, n)
	var visit func(r int32) int32
	visit = func(r int32) int32 { // returns a rule on a cycle, or -1
		state[r] = onPath
		for _, s := range first[r] {
			switch state[s] {
			case onPath:
				return s
			case unseen:
				if c := visit(s); c >= 0 {
					return c
				}
			}
		}
		state[r] = done
		return -1
	}
	for r := range b.rules {
		if state[r] == unseen {
			if c := visit(int32(r)); c >= 0 {
				return fmt.Errorf("grammar: rule %q is left-recursive (it can reach itself without matching a character; a repetition of something that can be empty does too)", b.ruleName(c))
			}
		}
	}
	return nil
}

// ruleName is the user's name of rule id: a generated rule's parent.
func (b *builder) ruleName(id int32) string {
	name := b.names[id]
	if b.byName[name] != id {
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			return name[:i]
		}
	}
	return name
}

func (b *builder) allNullable(a []elem, nullable []bool) bool {
	for _, e := range a {
		if e.kind == elemTerm || e.kind == elemRef && !nullable[e.arg] {
			return false
		}
	}
	return true
}
