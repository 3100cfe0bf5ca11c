package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/grammar"
	"github.com/modrun/modrun/internal/schematest"
)

// TestOpenAIClientResponseFormat: with response_format json_schema (strict)
// the official client's answer, plain and streamed, at temperature 1 over
// seeds, is JSON valid against the schema (by an independent validator);
// json_object gives a JSON object.
func TestOpenAIClientResponseFormat(t *testing.T) {
	_, hs := testServer(t, Config{})
	c := client(hs.URL)
	ctx := context.Background()
	schemas := schematest.Files(t)
	for _, name := range []string{"01-person", "06-nested", "11-oneof-discriminator", "15-formats"} {
		var schema map[string]any
		require.NoError(t, json.Unmarshal(schemas[name], &schema))
		val := schematest.Validator(t, name, schemas[name])
		for seed := int64(0); seed < 3; seed++ {
			params := openai.ChatCompletionNewParams{Model: "tinystories-mod", MaxTokens: openai.Int(300), Temperature: openai.Float(1), Seed: openai.Int(seed),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Describe Lily as JSON.")},
				ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
					JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "answer", Schema: schema, Strict: openai.Bool(true)}}}}
			res, err := c.Chat.Completions.New(ctx, params)
			require.NoError(t, err)
			answer := res.Choices[0].Message.Content
			assert.Equal(t, "stop", res.Choices[0].FinishReason, "%s seed %d: %q", name, seed, answer)
			var inst any
			require.NoError(t, json.Unmarshal([]byte(answer), &inst), "%s seed %d: %q", name, seed, answer)
			assert.NoError(t, val.Validate(inst), "%s seed %d: %q", name, seed, answer)

			stream := c.Chat.Completions.NewStreaming(ctx, params)
			var acc openai.ChatCompletionAccumulator
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			require.NoError(t, stream.Err())
			assert.Equal(t, answer, acc.Choices[0].Message.Content, "streamed the same")
		}
	}
	// json_object: strings of any length, so answers may run to
	// max_tokens (this story model writes stories in its strings): those
	// are the start of a JSON object, those that stop a whole one.
	for seed := int64(0); seed < 4; seed++ {
		res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "tinystories-mod", MaxTokens: openai.Int(400), Temperature: openai.Float(1), Seed: openai.Int(seed),
			Messages:       []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Lily as JSON.")},
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}})
		require.NoError(t, err)
		answer := res.Choices[0].Message.Content
		if res.Choices[0].FinishReason != "stop" {
			assert.True(t, jsonPrefix(t, answer), "%q", answer)
			continue
		}
		var obj map[string]any
		assert.NoError(t, json.Unmarshal([]byte(answer), &obj), "%q", answer)
	}
}

// jsonPrefix says whether s starts some JSON object, as the JSON grammar
// reads it byte by byte.
func jsonPrefix(t *testing.T, s string) bool {
	tokens := make([][]byte, 256)
	for i := range tokens {
		tokens[i] = []byte{byte(i)}
	}
	v, err := grammar.NewVocab(tokens, nil)
	require.NoError(t, err)
	m := grammar.NewMatcher(grammar.JSON(), v)
	for i := 0; i < len(s); i++ {
		if m.Accept(int32(s[i])) != nil {
			return false
		}
	}
	return strings.HasPrefix(s, "{")
}

// TestResponseFormatErrors: an unknown type or a schema the grammar cannot
// enforce is a 400 naming the field; completions take response_format too.
func TestResponseFormatErrors(t *testing.T) {
	_, hs := testServer(t, Config{})
	for _, tc := range []struct{ path, body, param, msg string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}`, "response_format.type", `"xml"`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object","minProperties":2}}}}`, "response_format.json_schema.schema", `"minProperties" is not supported`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a"}}}`, "response_format.json_schema.schema", "needs json_schema.schema"},
		{"/v1/completions", `{"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"string","format":"email"}}}}`, "response_format.json_schema.schema", `"format" is not supported`},
	} {
		status, body := post(t, hs.URL+tc.path, tc.body)
		assert.Equal(t, http.StatusBadRequest, status, tc.body)
		e, _ := body["error"].(map[string]any)
		assert.Equal(t, tc.param, e["param"], tc.body)
		assert.Contains(t, e["message"], tc.msg, tc.body)
	}
	status, body := post(t, hs.URL+"/v1/completions", `{"prompt":"Lily","max_tokens":100,"temperature":1,"seed":2,"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"enum":["yes","no"]}}}}`)
	require.Equal(t, http.StatusOK, status, body)
	choice := body["choices"].([]any)[0].(map[string]any)
	assert.Contains(t, []string{`"yes"`, `"no"`}, strings.TrimSpace(choice["text"].(string)), "a schema's JSON, and at most white space after it")
}
