package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/schematest"
)

// npmOpenAIVersion is the npm `openai` package the test drives: 6.49.0 is
// the newest that runs on Node 20 (7.x needs Node 22).
const npmOpenAIVersion = "6.49.0"

// npmOpenAI returns a node_modules folder holding the npm `openai` package,
// installed once into the user's cache (outside the repository) and reused.
// It skips the test, saying why, where node or npm is missing or the
// install fails (no network to the registry).
func npmOpenAI(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the npm openai client test needs %s on PATH: %v", tool, err)
		}
	}
	// The package uses fetch, ReadableStream and ??=: Node 20 or later.
	if out, err := exec.Command("node", "-e", "process.exit(Number(process.versions.node.split('.')[0]) < 20 ? 1 : 0)").CombinedOutput(); err != nil {
		v, _ := exec.Command("node", "--version").Output()
		t.Skipf("the npm openai client test needs Node 20 or later, have %s (%v %s)", strings.TrimSpace(string(v)), err, out)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "modrun-npm-openai-"+npmOpenAIVersion)
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "openai", "package.json")); err == nil {
		return modules
	}
	// Installed beside the final folder and renamed into place, so that a
	// test run killed mid-install or running beside another leaves no half
	// package to reuse.
	require.NoError(t, os.MkdirAll(cache, 0o755))
	tmp, err := os.MkdirTemp(cache, "modrun-npm-openai-install-")
	require.NoError(t, err)
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", tmp, "--no-save", "--no-audit", "--no-fund", "--ignore-scripts", "openai@"+npmOpenAIVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("npm install openai@%s failed (no network to the npm registry?): %v\n%s", npmOpenAIVersion, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another run installed it first.
		_, statErr := os.Stat(filepath.Join(modules, "openai", "package.json"))
		require.NoError(t, statErr, "renaming %s to %s: %v", tmp, dir, err)
	}
	return modules
}

// npmToolCall is a tool call as the npm client's types hold it.
type npmToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// What testdata/openai_npm.cjs prints.
type npmResults struct {
	Version string `json:"version"`
	Format  []struct {
		Seed         int64           `json:"seed"`
		FinishReason string          `json:"finish_reason"`
		Parsed       json.RawMessage `json:"parsed"`
	} `json:"format"`
	Tools []struct {
		Seed         int64         `json:"seed"`
		FinishReason string        `json:"finish_reason"`
		ToolCalls    []npmToolCall `json:"tool_calls"`
		PromptTokens int           `json:"prompt_tokens"`
		Stream       struct {
			FinishReason   string        `json:"finish_reason"`
			ToolCalls      []npmToolCall `json:"tool_calls"`
			ArgumentDeltas int           `json:"argument_deltas"`
		} `json:"stream"`
		FollowUp struct {
			PromptTokens             int           `json:"prompt_tokens"`
			LongerResultPromptTokens int           `json:"longer_result_prompt_tokens"`
			FinishReason             string        `json:"finish_reason"`
			Content                  string        `json:"content"`
			ToolCalls                []npmToolCall `json:"tool_calls"`
		} `json:"follow_up"`
	} `json:"tools"`
}

// TestNPMOpenAIClient: the official npm `openai` package (Node.js) against
// the server. response_format json_schema (strict) gives content that
// JSON.parse reads and that validates against the schema; tool_choice
// required gives tool_calls with ids and finish_reason tool_calls whose
// arguments validate against the function's parameters, and streamed, the
// argument deltas the client accumulates make the same calls; the tool's
// result sent back (role tool, tool_call_id) gets an answer. The checks
// are made here, in Go, by an independent validator.
func TestNPMOpenAIClient(t *testing.T) {
	modules := npmOpenAI(t)
	_, formatServer := testServer(t, Config{})
	// The shipped model's 512 tokens of context hold no tool descriptions.
	_, toolsServer := testServerOn(t, synthModel(t, "d=64,L=2,h=4,kv=2,ff=128,vocab=600,ctx=2048"), Config{ChatTemplate: "chatml"})

	schemas := schematest.Files(t)
	schemaName := "06-nested"
	var tools []any
	for _, f := range []struct{ name, schema string }{{"get_weather", weatherSchema}, {"get_time", timeSchema}} {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": f.name, "parameters": json.RawMessage(f.schema)}})
	}
	seeds := []int64{0, 1, 2}
	input, err := json.Marshal(map[string]any{"formatURL": formatServer.URL, "toolsURL": toolsServer.URL,
		"schema": json.RawMessage(schemas[schemaName]), "tools": tools, "seeds": seeds})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("testdata", "openai_npm.cjs"))
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	cmd.Stdin = bytes.NewReader(input)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = errors.New("past its time limit")
		}
		t.Fatalf("node testdata/openai_npm.cjs: %v\n%s", err, stderr.String())
	}

	var res npmResults
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), "%s", stdout.String())
	require.Equal(t, npmOpenAIVersion, res.Version, "the pinned client ran")
	require.Len(t, res.Format, len(seeds), "%s", stdout.String())
	require.Len(t, res.Tools, len(seeds), "%s", stdout.String())

	val := schematest.Validator(t, schemaName, schemas[schemaName])
	for _, f := range res.Format {
		assert.Equal(t, "stop", f.FinishReason, "seed %d", f.Seed)
		var inst any
		require.NoError(t, json.Unmarshal(f.Parsed, &inst))
		assert.NoError(t, val.Validate(inst), "seed %d: %s", f.Seed, f.Parsed)
	}

	validators := map[string]interface{ Validate(any) error }{
		"get_weather": schematest.Validator(t, "weather", []byte(weatherSchema)),
		"get_time":    schematest.Validator(t, "time", []byte(timeSchema)),
	}
	checkCalls := func(what string, seed int64, calls []npmToolCall) {
		require.NotEmpty(t, calls, "%s seed %d", what, seed)
		for _, call := range calls {
			assert.Equal(t, "function", call.Type, "%s seed %d", what, seed)
			assert.NotEmpty(t, call.ID, "%s seed %d", what, seed)
			v, ok := validators[call.Function.Name]
			require.True(t, ok, "%s seed %d called %q", what, seed, call.Function.Name)
			var args any
			require.NoError(t, json.Unmarshal([]byte(call.Function.Arguments), &args), "%s seed %d: %q", what, seed, call.Function.Arguments)
			assert.NoError(t, v.Validate(args), "%s seed %d: %s(%s)", what, seed, call.Function.Name, call.Function.Arguments)
		}
	}
	for _, r := range res.Tools {
		assert.Equal(t, "tool_calls", r.FinishReason, "seed %d", r.Seed)
		checkCalls("plain", r.Seed, r.ToolCalls)
		assert.Equal(t, "tool_calls", r.Stream.FinishReason, "streamed, seed %d", r.Seed)
		checkCalls("streamed", r.Seed, r.Stream.ToolCalls)
		require.Len(t, r.Stream.ToolCalls, len(r.ToolCalls), "seed %d: streamed as many calls", r.Seed)
		for i, call := range r.Stream.ToolCalls {
			assert.Equal(t, r.ToolCalls[i].Function.Name, call.Function.Name, "seed %d", r.Seed)
			assert.JSONEq(t, r.ToolCalls[i].Function.Arguments, call.Function.Arguments, "seed %d", r.Seed)
		}
		assert.Greater(t, r.Stream.ArgumentDeltas, 1, "seed %d: arguments come in deltas, token by token", r.Seed)
		// The call and its result are in the follow-up's prompt.
		assert.Greater(t, r.FollowUp.PromptTokens, r.PromptTokens+len(r.ToolCalls[0].Function.Arguments)/4, "seed %d: the call", r.Seed)
		assert.Greater(t, r.FollowUp.LongerResultPromptTokens, r.FollowUp.PromptTokens+5, "seed %d: the tool's result", r.Seed)
		assert.Empty(t, r.FollowUp.ToolCalls, "seed %d: tool_choice none", r.Seed)
		assert.NotEmpty(t, r.FollowUp.Content, "seed %d: the follow-up is answered", r.Seed)
		assert.NotEqual(t, "tool_calls", r.FollowUp.FinishReason, "seed %d", r.Seed)
	}
}
