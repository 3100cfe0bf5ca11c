package modrun_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun"
	"github.com/modrun/modrun/tokenizer"
)

// reply runs one chat turn greedily and returns its result and prompt.
func reply(t *testing.T, c *modrun.Chat, msgs []modrun.Message, n int) modrun.ChatResult {
	t.Helper()
	var printed string
	res, err := c.Reply(context.Background(), msgs, modrun.ChatOptions{
		GenerateOptions: modrun.GenerateOptions{MaxTokens: n},
		OnPrompt:        func(p string) { printed = p },
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, res.Prompt, printed)
	return res
}

func TestChatKeepsTheCacheAcrossTurns(t *testing.T) {
	m := open(t, modrun.Options{Backend: modrun.BackendCPU})
	c, err := m.NewChat("chatml")
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, "chatml", c.Template())

	msgs := []modrun.Message{{Role: modrun.RoleSystem, Content: "Tell a story."}, {Role: modrun.RoleUser, Content: "Once upon"}}
	first := reply(t, c, msgs, 5)
	assert.Equal(t, "<|im_start|>system\nTell a story.<|im_end|>\n<|im_start|>user\nOnce upon<|im_end|>\n<|im_start|>assistant\n", first.Prompt)
	held, err := c.Tokens()
	require.NoError(t, err)
	assert.Equal(t, first.PromptTokens+first.Tokens, len(held))

	// The second turn feeds only the end of the answer and the new message.
	msgs = append(msgs, modrun.Message{Role: modrun.RoleAssistant, Content: first.Reply}, modrun.Message{Role: modrun.RoleUser, Content: "Lily"})
	second := reply(t, c, msgs, 5)
	assert.Equal(t, "<|im_end|>\n<|im_start|>user\nLily<|im_end|>\n<|im_start|>assistant\n", second.Prompt)
	newTokens, err := m.Tokenize(second.Prompt, false)
	require.NoError(t, err)
	assert.Equal(t, len(newTokens), second.PromptTokens)
	all, err := c.Tokens()
	require.NoError(t, err)
	assert.Equal(t, held, all[:len(held)], "the first turn's tokens stay in the sequence")
	assert.Equal(t, len(held)+second.PromptTokens+second.Tokens, len(all))

	// A conversation that does not continue the held one starts afresh,
	// as does one after Reset.
	other := reply(t, c, msgs[:2], 5)
	assert.Equal(t, first.Prompt, other.Prompt)
	assert.Equal(t, first.Reply, other.Reply, "greedy: the same conversation gets the same answer")
	require.NoError(t, c.Reset())
	again := reply(t, c, msgs[:2], 5)
	assert.Equal(t, first.Reply, again.Reply)
}

func TestChatTemplateErrors(t *testing.T) {
	m := open(t, modrun.Options{Backend: modrun.BackendCPU})
	_, err := m.NewChat("")
	assert.ErrorIs(t, err, tokenizer.ErrNoChatTemplate, "the shipped story model has no chat template")
	assert.ErrorContains(t, err, shipped)
	_, err = m.NewChat("alpaca")
	assert.ErrorContains(t, err, `chat template "alpaca" is unknown (known: chatml, llama2, llama3, zephyr)`)
	assert.Equal(t, []string{"chatml", "llama2", "llama3", "zephyr"}, modrun.ChatTemplates())

	c, err := m.NewChat("llama2")
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Reply(context.Background(), nil, modrun.ChatOptions{}, nil)
	assert.ErrorContains(t, err, "no messages")
	_, err = c.Reply(context.Background(), []modrun.Message{{Role: modrun.RoleUser, Content: "a"}, {Role: modrun.RoleUser, Content: "b"}}, modrun.ChatOptions{}, nil)
	assert.ErrorContains(t, err, "roles must alternate")
}
