package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunJSONSchema: --json-schema (inline and a file) makes run print JSON
// of the schema after the prompt, at a temperature, and --grammar a text
// of the GBNF; chat's replies follow the schema too.
func TestRunJSONSchema(t *testing.T) {
	const schema = `{"type":"object","properties":{"name":{"type":"string","maxLength":10},"age":{"type":"integer","minimum":0}},"required":["name","age"],"additionalProperties":false}`
	file := filepath.Join(t.TempDir(), "schema.json")
	require.NoError(t, os.WriteFile(file, []byte(schema), 0o644))
	for _, arg := range []string{schema, file} {
		for _, seed := range []string{"1", "2", "3"} {
			code, out, stderr := modrun(t, "run", "-m", shippedMoD, "--backend", "cpu", "-p", "Lily", "-n", "80", "--temp", "1", "--seed", seed, "--json-schema", arg)
			require.Equal(t, 0, code, stderr)
			text := strings.TrimPrefix(out, "Lily")
			var v struct {
				Name *string
				Age  *int
			}
			require.NoError(t, json.Unmarshal([]byte(text), &v), "%q", out)
			assert.NotNil(t, v.Name)
			assert.NotNil(t, v.Age)
		}
	}
	gbnf := filepath.Join(t.TempDir(), "yesno.gbnf")
	require.NoError(t, os.WriteFile(gbnf, []byte(`root ::= (" yes" | " no") "."`), 0o644))
	code, out, stderr := modrun(t, "run", "-m", shippedMoD, "--backend", "cpu", "-p", "Lily", "-n", "20", "--grammar", gbnf)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^Lily (yes|no)\.\n?$`, out)

	code, out, stderr = modrunStdin(t, "Who is Lily?\n", "chat", "-m", shippedMoD, "--chat-template", "chatml", "--backend", "cpu", "-n", "80", "--json-schema", schema)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, `"name"`)
}

func TestGrammarFlagErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.gbnf")
	require.NoError(t, os.WriteFile(bad, []byte(`root ::= "x`), 0o644))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--grammar", bad}, "--grammar " + bad + ": modrun: grammar: line 1 column 12: unterminated literal"},
		{[]string{"--grammar", "/nonexistent.gbnf"}, "--grammar: open /nonexistent.gbnf"},
		{[]string{"--json-schema", `{"type":"object","minProperties":1}`}, `--json-schema {"type":"object","minProperties":1}: modrun: json schema: #: "minProperties" is not supported`},
		{[]string{"--json-schema", "/nonexistent.json"}, "--json-schema: open /nonexistent.json"},
		{[]string{"--grammar", bad, "--json-schema", "{}"}, "--grammar and --json-schema: give one"},
	} {
		code, _, stderr := modrun(t, append([]string{"run", "-m", shippedMoD, "-p", "x"}, tc.args...)...)
		assert.NotEqual(t, 0, code, tc.args)
		assert.Contains(t, stderr, tc.want, tc.args)
	}
}
