package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// client is OpenAI's official Go client pointed at hs, without retries (a
// 5xx must show, not be retried away).
func client(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

// TestOpenAIClientCompletions: a completion, greedy, is the API's own
// generation of the prompt; with echo and logprobs it returns the prompt
// first with its tokens' log-probabilities (the first null), as
// lm-evaluation-harness's loglikelihood reads them.
func TestOpenAIClientCompletions(t *testing.T) {
	_, hs := testServer(t, Config{})
	c := client(hs.URL)
	ctx := context.Background()
	_, want := greedy(t, "Once upon a time", 20)
	res, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "tinystories-mod", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(20), Temperature: openai.Float(0)})
	require.NoError(t, err)
	require.Len(t, res.Choices, 1)
	assert.Equal(t, want, res.Choices[0].Text)
	assert.Equal(t, openai.CompletionChoiceFinishReasonLength, res.Choices[0].FinishReason)
	assert.Equal(t, int64(20), res.Usage.CompletionTokens)
	assert.Equal(t, int64(5), res.Usage.PromptTokens, "BOS and the 4 tokens of the prompt")

	ids, err := model(t).Tokenize("Once upon a time there was", true)
	require.NoError(t, err)
	tokens := make([]int64, len(ids))
	for i, id := range ids {
		tokens[i] = int64(id)
	}
	res, err = c.Completions.New(ctx, openai.CompletionNewParams{Model: "tinystories-mod", Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: tokens},
		MaxTokens: openai.Int(0), Echo: openai.Bool(true), Logprobs: openai.Int(2)})
	require.NoError(t, err)
	ch := res.Choices[0]
	assert.Equal(t, "Once upon a time there was", ch.Text)
	scored, err := model(t).LogProbs(ctx, ids, 2)
	require.NoError(t, err)
	lp := ch.Logprobs
	require.Len(t, lp.Tokens, len(ids))
	require.Len(t, lp.TokenLogprobs, len(ids))
	assert.Equal(t, "", lp.Tokens[0], "BOS has no text")
	assert.True(t, strings.HasPrefix(lp.JSON.TokenLogprobs.Raw(), "[null,"), lp.JSON.TokenLogprobs.Raw())
	for i, st := range scored {
		assert.InDelta(t, st.LogProb, lp.TokenLogprobs[i+1], 1e-6, "token %d", i+1)
		assert.Len(t, lp.TopLogprobs[i+1], 2)
	}
	assert.Equal(t, " Once upon a time there was", strings.Join(lp.Tokens, ""))
	// Offsets into the echoed text, which starts "Once" (the first
	// word's SentencePiece space dropped).
	assert.Equal(t, []int64{0, 0, 4, 9, 11, 16, 22}, lp.TextOffset)
}

// TestOpenAIClientChat: a chat answer and the same one streamed agree, the
// stream's chunks joined are the answer, and its logprobs come per token.
func TestOpenAIClientChat(t *testing.T) {
	_, hs := testServer(t, Config{})
	c := client(hs.URL)
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "tinystories-mod", MaxTokens: openai.Int(16), Temperature: openai.Float(0),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Tell a story."), openai.UserMessage("Once upon a time")},
		Logprobs: openai.Bool(true), TopLogprobs: openai.Int(3)}
	res, err := c.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	require.Len(t, res.Choices, 1)
	answer := res.Choices[0].Message.Content
	assert.NotEmpty(t, answer)
	assert.Equal(t, "assistant", string(res.Choices[0].Message.Role))
	assert.Equal(t, int64(16), res.Usage.CompletionTokens)
	lps := res.Choices[0].Logprobs.Content
	require.Len(t, lps, 16)
	for _, lp := range lps {
		require.Len(t, lp.TopLogprobs, 3)
		assert.Equal(t, lp.Token, lp.TopLogprobs[0].Token, "greedy: the most likely token")
		assert.Equal(t, lp.Logprob, lp.TopLogprobs[0].Logprob)
		assert.Less(t, lp.Logprob, 0.0)
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		chunks++
		if len(chunk.Choices) == 1 && chunk.Choices[0].Delta.Content != "" {
			assert.Contains(t, chunk.RawJSON(), `"mod":{"`, "each token's chunk carries its routing")
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, answer, acc.Choices[0].Message.Content)
	assert.Equal(t, "length", acc.Choices[0].FinishReason)
	assert.GreaterOrEqual(t, chunks, 16+2, "a role chunk, a chunk per token, the finish")
	assert.Equal(t, int64(16), acc.Usage.CompletionTokens)
}

// TestOpenAIClientError: the client sees the server's error as OpenAI's
// own, with its status and the field at fault.
func TestOpenAIClientError(t *testing.T) {
	_, hs := testServer(t, Config{})
	c := client(hs.URL)
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o", Temperature: openai.Float(3),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	assert.Equal(t, "temperature", apiErr.Param)
	assert.Equal(t, "invalid_value", apiErr.Code)
	assert.Contains(t, apiErr.Message, "temperature 3: must be in [0, 2]")

	models, err := c.Models.List(context.Background())
	require.NoError(t, err)
	require.Len(t, models.Data, 1)
	assert.Equal(t, "tinystories-mod", models.Data[0].ID)
}
