package modrun

import (
	"fmt"
	"sync"

	"github.com/modrun/modrun/engine/grammar"
)

// Grammar is a compiled grammar: generation under it (GenerateOptions.
// Grammar) draws only tokens that keep the new text inside its language,
// and ends (end of generation) only where the language allows. One Grammar
// serves any number of concurrent generations, on any model.
type Grammar = grammar.Grammar

// ParseGrammar compiles GBNF, the grammar format of llama.cpp (--grammar):
// rules `name ::= ...` starting at root, literals "...", classes [a-z]
// [^"\\], grouping, | and the repetitions ? * + {m,n}, # comments.
func ParseGrammar(gbnf string) (*Grammar, error) {
	g, err := grammar.Parse(gbnf)
	if err != nil {
		return nil, fmt.Errorf("modrun: %w", err)
	}
	return g, nil
}

// grammarVocab is a model's vocabulary as the grammar sees it (a trie of
// the tokens' bytes), built on its first constrained generation.
type grammarVocab struct {
	once sync.Once
	v    *grammar.Vocab
	err  error
}

func (m *Model) grammarVocab() (*grammar.Vocab, error) {
	g := &m.grammar
	g.once.Do(func() { g.v, g.err = grammar.FromTokenizer(m.tok) })
	return g.v, g.err
}

// constraint is the grammar state of g (GenerateOptions.check's) for one
// Generate call: nil without a grammar.
func (m *Model) constraint(g *Grammar) (*grammar.Matcher, error) {
	if g == nil {
		return nil, nil
	}
	v, err := m.grammarVocab()
	if err != nil {
		return nil, fmt.Errorf("modrun: Grammar: the model's vocabulary: %w", err)
	}
	return grammar.NewMatcher(g, v), nil
}

// JSONSchemaGrammar compiles a JSON schema (--json-schema, a
// response_format's json_schema) to the grammar of the JSON texts it
// accepts: objects with required and optional properties (in the schema's
// order), arrays with minItems/maxItems, enum, const, strings with
// minLength/maxLength, a pattern or the formats date, time, date-time and
// uuid, number, integer (minimum 0 or 1), boolean, null, anyOf, oneOf
// (alternatives of distinct types or a const discriminator), $ref into the
// schema ($defs, recursive too). A keyword the grammar cannot enforce is
// an error naming it, never ignored.
func JSONSchemaGrammar(schema []byte) (*Grammar, error) {
	g, err := grammar.Schema(schema)
	if err != nil {
		return nil, fmt.Errorf("modrun: %w", err)
	}
	return g, nil
}

// JSONGrammar is the grammar of any JSON object (a json_object response
// format).
func JSONGrammar() *Grammar { return jsonGrammar() }

var jsonGrammar = sync.OnceValue(grammar.JSON)

// JSONSchemaGBNF is the GBNF of JSONSchemaGrammar's grammar with its
// rules renamed under name (the start rule is name, the others name-...),
// to be used inside a larger grammar given to ParseGrammar: a server's
// tool call wraps each function's arguments so.
func JSONSchemaGBNF(schema []byte, name string) (string, error) {
	src, err := grammar.SchemaRules(schema, name)
	if err != nil {
		return "", fmt.Errorf("modrun: %w", err)
	}
	return src, nil
}
