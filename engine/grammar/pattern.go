package grammar

import (
	"fmt"
	"regexp/syntax"
	"strings"
)

// patternGBNF turns a schema's pattern (a regular expression, searched
// for in the string as JSON schema says: unanchored ends match anything)
// into the GBNF of a JSON string's body. The pattern's characters are
// written unescaped, so those JSON must escape (", \ and control
// characters) are left out of its classes, a restriction the schema
// allows; a literal one is refused.
func patternGBNF(p string) (string, error) {
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return "", fmt.Errorf("%q: %w", p, err)
	}
	subs := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	start, end := false, false
	if len(subs) > 0 && subs[0].Op == syntax.OpBeginText {
		start, subs = true, subs[1:]
	}
	if len(subs) > 0 && subs[len(subs)-1].Op == syntax.OpEndText {
		end, subs = true, subs[:len(subs)-1]
	}
	var parts []string
	if !start {
		parts = append(parts, "char*")
	}
	for _, s := range subs {
		g, err := regexpGBNF(s)
		if err != nil {
			return "", fmt.Errorf("%q: %w", p, err)
		}
		parts = append(parts, g)
	}
	if !end {
		parts = append(parts, "char*")
	}
	if len(parts) == 0 {
		return `""`, nil
	}
	return "(" + strings.Join(parts, " ") + ")", nil
}

// plain are the characters a JSON string holds unescaped.
var plain = []runeRange{{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7E}, {0x80, 0x10FFFF}}

func regexpGBNF(r *syntax.Regexp) (string, error) {
	sub := func(i int) (string, error) { return regexpGBNF(r.Sub[i]) }
	switch r.Op {
	case syntax.OpEmptyMatch:
		return `""`, nil
	case syntax.OpLiteral:
		var parts []string
		for _, c := range r.Rune {
			rs := []runeRange{{c, c}}
			if r.Flags&syntax.FoldCase != 0 {
				if l, u := strings.ToLower(string(c)), strings.ToUpper(string(c)); l != u {
					rs = []runeRange{{[]rune(l)[0], []rune(l)[0]}, {[]rune(u)[0], []rune(u)[0]}}
				}
			}
			cls, err := classGBNF(rs)
			if err != nil {
				return "", err
			}
			parts = append(parts, cls)
		}
		return "(" + strings.Join(parts, " ") + ")", nil
	case syntax.OpCharClass:
		var rs []runeRange
		for i := 0; i+1 < len(r.Rune); i += 2 {
			rs = append(rs, runeRange{r.Rune[i], r.Rune[i+1]})
		}
		return classGBNF(rs)
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return classGBNF([]runeRange{{0, 0x10FFFF}})
	case syntax.OpCapture:
		return sub(0)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		s, err := sub(0)
		if err != nil {
			return "", err
		}
		return "(" + s + ")" + map[syntax.Op]string{syntax.OpStar: "*", syntax.OpPlus: "+", syntax.OpQuest: "?"}[r.Op], nil
	case syntax.OpRepeat:
		s, err := sub(0)
		if err != nil {
			return "", err
		}
		if r.Min > maxRepeat || r.Max > maxRepeat {
			return "", fmt.Errorf("repetition {%d,%d}: counts above %d are not supported", r.Min, r.Max, maxRepeat)
		}
		return "(" + s + ")" + repeatSuffix(r.Min, r.Max), nil
	case syntax.OpConcat, syntax.OpAlternate:
		parts := make([]string, len(r.Sub))
		for i := range r.Sub {
			s, err := sub(i)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		sep := " "
		if r.Op == syntax.OpAlternate {
			sep = " | "
		}
		return "(" + strings.Join(parts, sep) + ")", nil
	}
	return "", fmt.Errorf("%s is not supported in a pattern (only literals, classes, ., groups, |, ?, *, +, {m,n} and ^ $ at the ends)", r)
}

// classGBNF is a GBNF class of the plain characters among rs.
func classGBNF(rs []runeRange) (string, error) {
	var in []runeRange
	for _, r := range normalize(rs) {
		for _, p := range plain {
			if lo, hi := max(r.lo, p.lo), min(r.hi, p.hi); lo <= hi {
				in = append(in, runeRange{lo, hi})
			}
		}
	}
	in = normalize(in)
	if len(in) == 0 {
		return "", fmt.Errorf("a character JSON writes escaped (\", \\ or a control character) is not supported in a pattern")
	}
	var b strings.Builder
	b.WriteByte('[')
	for _, r := range in {
		fmt.Fprintf(&b, `\U%08X`, r.lo)
		if r.hi != r.lo {
			fmt.Fprintf(&b, `-\U%08X`, r.hi)
		}
	}
	b.WriteByte(']')
	return b.String(), nil
}
