package server

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun"
	"github.com/modrun/modrun/internal/schematest"
	"github.com/modrun/modrun/internal/synthtest"
)

const weatherSchema = `{"type":"object","properties":{"location":{"type":"string","maxLength":20},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["location"],"additionalProperties":false}`
const timeSchema = `{"type":"object","properties":{"zone":{"type":"string","enum":["UTC","CET"]}},"required":["zone"],"additionalProperties":false}`

// synthModel opens a random-weight model of shape spec (mod/synth): the
// shipped model's 512 tokens of context hold no tool descriptions.
func synthModel(t *testing.T, spec string) *modrun.Model {
	t.Helper()
	m, err := modrun.Open(synthtest.Save(t, spec), modrun.Options{Backend: modrun.BackendCPU})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

func weatherTools(t *testing.T) []openai.ChatCompletionToolUnionParam {
	var w, tm map[string]any
	require.NoError(t, json.Unmarshal([]byte(weatherSchema), &w))
	require.NoError(t, json.Unmarshal([]byte(timeSchema), &tm))
	return []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather", Description: openai.String("The weather at a place"), Parameters: w}),
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_time", Parameters: tm}),
	}
}

// TestOpenAIClientTools: with tools and tool_choice required (chatml's and
// llama3's formats), the official client gets tool_calls with ids, whose
// arguments validate against the function's schema, finish_reason
// tool_calls; streamed, the accumulated calls are the same; a named
// tool_choice calls that function; the tool's result sent back continues
// the conversation.
func TestOpenAIClientTools(t *testing.T) {
	for _, tc := range []struct {
		template, spec string
		seeds          int64
	}{
		{"chatml", "d=64,L=2,h=4,kv=2,ff=128,vocab=600,ctx=2048", 4},  // a SentencePiece vocabulary
		{"llama3", "llama3.2-1b,d=32,L=1,h=2,kv=1,ff=64,ctx=2048", 2}, // Llama 3's, and its template from the file
	} {
		template := tc.template
		t.Run(template, func(t *testing.T) {
			_, hs := testServerOn(t, synthModel(t, tc.spec), Config{ChatTemplate: template})
			c := client(hs.URL)
			ctx := context.Background()
			validators := map[string]interface{ Validate(any) error }{
				"get_weather": schematest.Validator(t, "weather", []byte(weatherSchema)),
				"get_time":    schematest.Validator(t, "time", []byte(timeSchema)),
			}
			for seed := int64(0); seed < tc.seeds; seed++ {
				params := openai.ChatCompletionNewParams{Model: "tinystories-mod", MaxTokens: openai.Int(300), Temperature: openai.Float(1), Seed: openai.Int(seed),
					Messages:   []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the weather in Paris?")},
					Tools:      weatherTools(t),
					ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
					// One call: a random model would chain calls to max_tokens.
					ParallelToolCalls: openai.Bool(false)}
				res, err := c.Chat.Completions.New(ctx, params)
				require.NoError(t, err)
				ch := res.Choices[0]
				require.Equal(t, "tool_calls", ch.FinishReason, "seed %d: %s", seed, res.RawJSON())
				require.NotEmpty(t, ch.Message.ToolCalls)
				if template == "llama3" {
					assert.Len(t, ch.Message.ToolCalls, 1, "Llama 3.1's format: one call per turn")
				}
				for _, call := range ch.Message.ToolCalls {
					assert.Equal(t, "function", call.Type)
					assert.NotEmpty(t, call.ID)
					val, ok := validators[call.Function.Name]
					require.True(t, ok, "called %q", call.Function.Name)
					var args any
					require.NoError(t, json.Unmarshal([]byte(call.Function.Arguments), &args), "%q", call.Function.Arguments)
					assert.NoError(t, val.Validate(args), "%s(%s)", call.Function.Name, call.Function.Arguments)
				}

				stream := c.Chat.Completions.NewStreaming(ctx, params)
				var acc openai.ChatCompletionAccumulator
				argDeltas := 0
				for stream.Next() {
					chunk := stream.Current()
					acc.AddChunk(chunk)
					if len(chunk.Choices) == 1 && len(chunk.Choices[0].Delta.ToolCalls) == 1 && chunk.Choices[0].Delta.ToolCalls[0].Function.Arguments != "" {
						argDeltas++
					}
				}
				require.NoError(t, stream.Err())
				require.Len(t, acc.Choices, 1)
				assert.Equal(t, "tool_calls", acc.Choices[0].FinishReason)
				require.Len(t, acc.Choices[0].Message.ToolCalls, len(ch.Message.ToolCalls))
				for i, call := range acc.Choices[0].Message.ToolCalls {
					assert.Equal(t, ch.Message.ToolCalls[i].Function.Name, call.Function.Name)
					assert.JSONEq(t, ch.Message.ToolCalls[i].Function.Arguments, call.Function.Arguments)
				}
				assert.Greater(t, argDeltas, 1, "arguments come in deltas, token by token")

				// The tool's answer goes back; the model goes on.
				params.Messages = append(params.Messages, ch.Message.ToParam(), openai.ToolMessage(`{"temperature": 21}`, ch.Message.ToolCalls[0].ID))
				params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
				params.MaxTokens = openai.Int(8)
				res, err = c.Chat.Completions.New(ctx, params)
				require.NoError(t, err)
				assert.Empty(t, res.Choices[0].Message.ToolCalls)
				assert.NotEmpty(t, res.Choices[0].Message.Content)
			}
			params := openai.ChatCompletionNewParams{Model: "tinystories-mod", MaxTokens: openai.Int(200), Temperature: openai.Float(1), Seed: openai.Int(9),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Time?")}, Tools: weatherTools(t),
				ToolChoice: openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_time"})}
			res, err := c.Chat.Completions.New(ctx, params)
			require.NoError(t, err)
			require.NotEmpty(t, res.Choices[0].Message.ToolCalls)
			for _, call := range res.Choices[0].Message.ToolCalls {
				assert.Equal(t, "get_time", call.Function.Name)
			}
			// auto: free text or calls, each well formed.
			params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}
			params.MaxTokens = openai.Int(40)
			for seed := int64(0); seed < tc.seeds; seed++ {
				params.Seed = openai.Int(seed)
				res, err := c.Chat.Completions.New(ctx, params)
				require.NoError(t, err)
				ch := res.Choices[0]
				if len(ch.Message.ToolCalls) > 0 {
					assert.Contains(t, []string{"tool_calls", "length"}, ch.FinishReason)
				} else {
					assert.NotEqual(t, "tool_calls", ch.FinishReason)
				}
			}
		})
	}
}

// TestToolErrors: what the server cannot do with tools is a 400 naming
// the field.
func TestToolErrors(t *testing.T) {
	_, hs := testServer(t, Config{})
	_, hsLlama2 := testServer(t, Config{ChatTemplate: "llama2"})
	tool := `{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}`
	for _, tc := range []struct{ url, body, param, msg string }{
		{hs.URL, `{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`, "tool_choice", "needs tools"},
		{hs.URL, `{"messages":[{"role":"user","content":"x"}],"parallel_tool_calls":true}`, "parallel_tool_calls", "needs tools"},
		{hs.URL, `{"messages":[{"role":"user","content":"x"}],"tools":[` + tool + `],"tool_choice":"sometimes"}`, "tool_choice", `"sometimes"`},
		{hs.URL, `{"messages":[{"role":"user","content":"x"}],"tools":[` + tool + `],"tool_choice":{"type":"function","function":{"name":"g"}}}`, "tool_choice", `"g", which is not among the tools`},
		{hs.URL, `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"custom","function":{"name":"f"}}]}`, "tools[0].type", "only function tools"},
		{hs.URL, `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"a b"}}]}`, "tools[0].function.name", `"a b"`},
		{hs.URL, `{"messages":[{"role":"user","content":"x"}],"tools":[` + tool + `,` + tool + `]}`, "tools[1].function.name", "given twice"},
		{hs.URL, `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","minProperties":1}}}]}`, "tools[0].function.parameters", `"minProperties" is not supported`},
		{hs.URL, `{"messages":[{"role":"user","content":"x"}],"tools":[` + tool + `],"response_format":{"type":"json_object"}}`, "response_format", "with tools"},
		{hs.URL, `{"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{x"}}]}]}`, "messages[0].tool_calls", "not JSON"},
		{hsLlama2.URL, `{"messages":[{"role":"user","content":"x"}],"tools":[` + tool + `]}`, "tools", `"llama2" has no tool-call format`},
		{hsLlama2.URL, `{"messages":[{"role":"user","content":"x"},{"role":"tool","content":"1","tool_call_id":"c"}]}`, "messages", `"llama2" has no tool-call format`},
	} {
		status, body := post(t, tc.url+"/v1/chat/completions", tc.body)
		assert.Equal(t, http.StatusBadRequest, status, tc.body)
		e, _ := body["error"].(map[string]any)
		assert.Equal(t, tc.param, e["param"], tc.body)
		assert.Contains(t, e["message"], tc.msg, tc.body)
	}
}
