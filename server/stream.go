package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// sse writes a Server-Sent Events stream: one "data: JSON" event per
// chunk, "data: [DONE]" at the end, each flushed at once. A write that
// fails means the client went away: errClientGone, and the generation
// behind it is cancelled.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController // flushes through any wrapper that has Unwrap
	started bool
}

func newSSE(w http.ResponseWriter) *sse {
	return &sse{w: w, rc: http.NewResponseController(w)}
}

func (s *sse) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
}

func (s *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("server: encoding a chunk: %w", err)
	}
	return s.write("data: " + string(b) + "\n\n")
}

func (s *sse) done() error { return s.write("data: [DONE]\n\n") }

func (s *sse) write(line string) error {
	s.start()
	if _, err := s.w.Write([]byte(line)); err != nil {
		return errClientGone
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return errClientGone
	}
	return nil
}

// failed reports err inside a stream already started: an error event
// (OpenAI's clients raise it) before [DONE].
func (s *sse) failed(err error) {
	var ae *apiError
	msg := err.Error()
	if e, ok := err.(*apiError); ok {
		ae = e
	} else {
		ae = &apiError{Type: "server_error", Message: msg}
	}
	_ = s.send(map[string]any{"error": map[string]any{"message": ae.Message, "type": ae.Type, "param": nil, "code": nil}})
	_ = s.done()
}
