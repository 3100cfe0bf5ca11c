package server

import (
	"bytes"
	"encoding/json"

	"github.com/modrun/modrun"
)

// responseFormat is OpenAI's response_format: "text", "json_object" (any
// JSON object) or "json_schema" (JSON valid against the schema). Both JSON
// kinds constrain sampling with a grammar, so the answer parses whatever
// the model: strict or not, the schema is enforced.
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"json_schema"`
}

// formatGrammar is the grammar response_format asks for: nil for none or
// "text"; an unknown type or a schema the grammar cannot enforce is a
// 400 naming the field.
func (rf *responseFormat) grammar() (*modrun.Grammar, error) {
	if rf == nil {
		return nil, nil
	}
	switch rf.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		return modrun.JSONGrammar(), nil
	case "json_schema":
		if rf.JSONSchema == nil || len(bytes.TrimSpace(rf.JSONSchema.Schema)) == 0 || bytes.Equal(bytes.TrimSpace(rf.JSONSchema.Schema), []byte("null")) {
			return nil, badRequest("response_format.json_schema.schema", "invalid_value", "response_format json_schema needs json_schema.schema")
		}
		g, err := modrun.JSONSchemaGrammar(rf.JSONSchema.Schema)
		if err != nil {
			return nil, badRequest("response_format.json_schema.schema", "invalid_value", "%v", err)
		}
		return g, nil
	}
	return nil, badRequest("response_format.type", "invalid_value", "response_format type %q: text, json_object or json_schema", rf.Type)
}

// applyFormat sets opts.Grammar from the request's response_format.
func (r *sampling) applyFormat(opts *modrun.GenerateOptions) error {
	g, err := r.ResponseFormat.grammar()
	if err != nil {
		return err
	}
	opts.Grammar = g
	return nil
}
