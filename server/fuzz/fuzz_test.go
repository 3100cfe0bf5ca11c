package fuzz_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modrun/modrun"
	"github.com/modrun/modrun/server"
)

// FuzzGarbageBodies: no body, however broken, makes the server panic or
// answer other than 200, 400 or 413.
func FuzzGarbageBodies(f *testing.F) {
	for _, seed := range []string{`{"prompt":"x","max_tokens":1}`, `{"messages":[{"role":"user","content":"x"}],"max_tokens":1}`,
		`{"prompt":[1,2,3],"echo":true,"logprobs":3,"max_tokens":0}`, "\x00\xff", `{"stop":[1]}`, `null`, `{"prompt":null}`} {
		f.Add(seed)
	}
	m, err := modrun.Open("../../models/tinystories-mod.gguf", modrun.Options{Backend: modrun.BackendCPU})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Close() })
	s := server.New(server.Config{ModelName: "m", ChatTemplate: "chatml", MaxBody: 4 << 10})
	s.SetModel(m)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"} {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest("POST", path, strings.NewReader(body))
			h.ServeHTTP(rec, r)
			if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("%s %q: status %d: %s", path, body, rec.Code, rec.Body.String())
			}
		}
	})
}
