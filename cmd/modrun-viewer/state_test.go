package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modrun/modrun"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWorkerCommands drives what the keys do, without a window: start,
// stop (Esc) in the middle of a story, switch routing (Ctrl+T), reset
// (Ctrl+R), and quit (the window closing) while a story runs.
func TestWorkerCommands(t *testing.T) {
	st := &state{}
	st.v.Prompt = "Once upon"
	wk := newWorker(st, shipped, modrun.Options{Backend: modrun.BackendCPU}, 0, io.Discard)
	go wk.run()
	waitFor := func(what string, ok func(v view) bool) view {
		t.Helper()
		var v view
		require.Eventually(t, func() bool { v = st.snapshot(); return ok(v) }, time.Minute, time.Millisecond, what)
		return v
	}

	wk.send(cmdStart)
	waitFor("generating", func(v view) bool { return v.Running && generated(v.Tokens) >= 3 })
	wk.stop()
	v := waitFor("stopped", func(v view) bool { return v.Done && !v.Running })
	assert.True(t, strings.HasPrefix(v.Status, "stopped after"), v.Status)
	assert.Less(t, generated(v.Tokens), 500, "stopped before the context was full")

	assert.Equal(t, modrun.RoutingRouter, v.Info.Routing)
	wk.send(cmdRouting)
	v = waitFor("predictor routing", func(v view) bool { return v.Info.Routing == modrun.RoutingPredictor })
	assert.Empty(t, v.Tokens)
	wk.send(cmdStart)
	waitFor("a story with the predictor", func(v view) bool { return generated(v.Tokens) >= 3 })
	wk.stop()
	waitFor("stopped", func(v view) bool { return v.Done && !v.Running })

	wk.send(cmdReset)
	v = waitFor("reset", func(v view) bool { return v.Status == "reset" })
	assert.Empty(t, v.Tokens)

	wk.send(cmdStart)
	waitFor("generating", func(v view) bool { return v.Running })
	wk.quit() // returns once the model is closed
	assert.Nil(t, wk.model)
}
