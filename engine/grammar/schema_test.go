package grammar

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/schematest"
)

// TestSchemaSamplesValidate: the test schemas (internal/schematest: nested
// objects, optional properties, bounded arrays, enums, consts, $ref
// (recursive too), anyOf, oneOf, patterns, formats, maps): texts sampled under each schema's grammar
// over both real vocabularies are JSON that the independent validator
// accepts.
func TestSchemaSamplesValidate(t *testing.T) {
	for name, schema := range schematest.Files(t) {
		g, err := Schema(schema)
		require.NoError(t, err, name)
		val := schematest.Validator(t, name, schema)
		for kind, cv := range vocabs {
			t.Run(name+"/"+kind, func(t *testing.T) {
				tok, v := cv.get(t)
				for seed := uint64(0); seed < 8; seed++ {
					text, ended := sampleText(t, g, tok, v, rand.New(rand.NewPCG(seed, 11)), `"]}`, 400)
					require.True(t, ended, "seed %d: no end in 400 tokens: %q", seed, text)
					var inst any
					require.NoError(t, json.Unmarshal([]byte(text), &inst), "seed %d: %q", seed, text)
					assert.NoError(t, val.Validate(inst), "seed %d: %q", seed, text)
				}
			})
		}
	}
}

// TestSchemaLanguage checks a few schemas' grammars on texts by hand: what
// must be accepted, and what the schema forbids.
func TestSchemaLanguage(t *testing.T) {
	for _, tc := range []struct {
		schema  string
		yes, no []string
	}{
		{`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["b"]}`,
			[]string{`{"b":""}`, `{"a":1,"b":"x"}`, `{ "a": -3, "b": "y" }`}, []string{`{}`, `{"a":1}`, `{"b":"x","a":1}`, `{"b":"x",}`, `{,"b":"x"}`}},
		{`{"type":"array","items":{"enum":["x",2]},"minItems":1,"maxItems":2}`,
			[]string{`["x"]`, `[2,"x"]`}, []string{`[]`, `["x",2,2]`, `["y"]`}},
		{`{"anyOf":[{"type":"null"},{"const":{"k":[true]}}]}`, []string{`null`, `{"k":[true]}`}, []string{`{"k":[]}`, `true`}},
		{`{"type":"string","pattern":"^a[0-9]{2}$"}`, []string{`"a12"`}, []string{`"a1"`, `"b12"`, `"a123"`}},
		{`{"type":"string","maxLength":2}`, []string{`""`, `"ab"`, `"\n\u00e9"`}, []string{`"abc"`, `"\ud800"`}},
		{`{"type":"integer","minimum":0}`, []string{`0`, `17`}, []string{`-1`, `01`, `1.5`}},
		{`{"type":"string","pattern":"ab+c"}`, []string{`"abc"`, `"xxabbbcyy"`}, []string{`"ac"`, `"ab"`}},
		{`{"type":"string","format":"date"}`, []string{`"2024-01-31"`, `"2024-04-30"`, `"2023-02-28"`}, []string{`"2024-04-31"`, `"2024-02-30"`, `"2024-13-01"`, `"2024-00-10"`}},
	} {
		g, err := Schema([]byte(tc.schema))
		require.NoError(t, err, tc.schema)
		for _, s := range tc.yes {
			assert.True(t, matches(g, s), "%s should accept %s", tc.schema, s)
		}
		for _, s := range tc.no {
			assert.False(t, matches(g, s), "%s should refuse %s", tc.schema, s)
		}
	}
}

// TestSchemaRefusals: what the grammar cannot enforce is refused, naming
// the keyword and where it is.
func TestSchemaRefusals(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		{`{"type":"object","properties":{"a":{"type":"string","format":"email"}}}`, `#/properties/a: "format" is not supported`},
		{`{"type":"object","minProperties":1}`, `#: "minProperties" is not supported`},
		{`{"type":"array","uniqueItems":true}`, `"uniqueItems" is not supported`},
		{`{"type":"number","minimum":3}`, `"minimum" is not supported`},
		{`{"type":"integer","maximum":3}`, `"maximum" is not supported`},
		{`{"type":"string","pattern":"\\bx"}`, `is not supported in a pattern`},
		{`{"type":"string","pattern":"^\"$"}`, `a character JSON writes escaped`},
		{`{"oneOf":[{"type":"string"},{"type":"string","maxLength":2}]}`, `"oneOf" is not supported`},
		{`{"$ref":"https://example.com/s.json"}`, `"$ref" is not supported`},
		{`{"$ref":"#/$defs/missing"}`, `does not resolve`},
		{`{"type":"object","properties":{"a":{}},"required":["b"]}`, `"b" is required but not among the properties`},
		{`{"type":"array","maxItems":5000}`, `"maxItems" is not supported`},
		{`{"type":"string","minLength":3,"maxLength":2}`, `maxLength 2 is below minLength 3`},
		{`{"type":"strng"}`, `"strng" is not a JSON schema type`},
		{`{"allOf":[{"type":"string"}]}`, `"allOf" is not supported`},
		{`{"not":{"type":"string"}}`, `"not" is not supported`},
		{`{"type":"object","patternProperties":{"^a":{}}}`, `"patternProperties" is not supported`},
		{`{"type":"array","prefixItems":[{"type":"string"}]}`, `"prefixItems" is not supported`},
		{`{"type":"string","maxItems":2}`, `"maxItems" is not supported (on a schema of type "string")`},
		{`false`, `accepts nothing`},
		{`{"type":`, `json schema:`},
	} {
		_, err := Schema([]byte(tc.schema))
		if assert.Error(t, err, tc.schema) {
			assert.Contains(t, err.Error(), tc.want, tc.schema)
		}
	}
}

// TestSchemaRules: two schemas' renamed rules live in one grammar.
func TestSchemaRules(t *testing.T) {
	a, err := SchemaRules([]byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`), "fa")
	require.NoError(t, err)
	b, err := SchemaRules([]byte(`{"enum":["x{1}", "[y]", "#z"]}`), "fb")
	require.NoError(t, err)
	g := mustParse(t, "root ::= \"a\" fa | \"b\" fb\n"+a+b)
	assert.True(t, matches(g, `a{"n": 3}`))
	assert.True(t, matches(g, `b"x{1}"`))
	assert.True(t, matches(g, `b"#z"`))
	assert.False(t, matches(g, `a"x{1}"`))
}
