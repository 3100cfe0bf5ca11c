// Package server is modrun's HTTP API: OpenAI's chat and completions
// endpoints (SSE streaming, logprobs, echo), /v1/models, /health,
// /metrics, /tokenize and /detokenize, and an embedded web page that chats
// with the model and draws its live routing map (DESIGN.md §8).
//
// It uses the root modrun API and nothing below it. One request is one
// Session (a Chat for /v1/chat/completions); up to Config.Parallel run at
// once, and up to Config.Queue more wait for a slot, beyond which a request
// gets 503 with Retry-After. A Model opened with Options.Parallel runs its
// sessions in shared steps (the CPU backend); otherwise they take turns.
// Either way this package does the same.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modrun/modrun"
)

// Config is how a Server runs. The zero value of each field has a default.
type Config struct {
	// ModelName is the model's id in /v1/models and responses. "" = "modrun".
	ModelName string
	// StrictModel answers a request naming another model 404
	// model_not_found, as OpenAI's API does; by default a one-model server
	// serves whatever name a client sends, as llama-server does (tools that
	// send a fixed name, "gpt-4o-mini", work unchanged).
	StrictModel bool
	// ChatTemplate names the chat template (modrun.ChatTemplates) for a
	// model file without its own; "" = the file's.
	ChatTemplate string
	// Parallel is how many requests generate at once (1 when 0); Queue
	// how many more wait for a slot (4 x Parallel when 0; negative: none).
	Parallel, Queue int
	// APIKey, when set, is the Bearer token every API request must carry
	// (401 otherwise); the page, /health and /metrics stay open.
	APIKey string
	// CORS is the origin allowed to call the API from a browser ("*" for
	// any); "" sends no CORS headers.
	CORS string
	// MaxBody is the largest request body in bytes (413 beyond); 0 = 8 MiB.
	MaxBody int64
	// RetryAfter is the Retry-After of a 503 when the queue is full; 0 = 1s.
	RetryAfter time.Duration
	// Log receives one line per request; nil = io.Discard.
	Log io.Writer
}

// Server serves one model. Its zero value is not usable: call New.
type Server struct {
	cfg     Config
	model   atomic.Pointer[modrun.Model]
	info    modrun.Info
	slots   chan struct{} // one per request generating
	queued  atomic.Int64  // requests waiting for a slot
	metrics *metrics
	log     *log.Logger
	handler http.Handler

	// stop is cancelled when Shutdown's grace period is over: the
	// generations still running end, and their requests return.
	stop     context.Context
	cancel   context.CancelFunc
	inflight sync.WaitGroup // API requests being handled
	http     *http.Server

	// tokenHook, when set (by tests), runs after each generated token on
	// the generating goroutine: a test holds a generation mid-stream.
	tokenHook func()
}

// New makes a server whose /health says 503 (loading) until SetModel.
func New(cfg Config) *Server {
	if cfg.ModelName == "" {
		cfg.ModelName = "modrun"
	}
	cfg.Parallel = max(cfg.Parallel, 1)
	switch {
	case cfg.Queue == 0:
		cfg.Queue = 4 * cfg.Parallel
	case cfg.Queue < 0:
		cfg.Queue = 0
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 8 << 20
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	s := &Server{cfg: cfg, slots: make(chan struct{}, cfg.Parallel), metrics: newMetrics(), log: log.New(cfg.Log, "", log.LstdFlags)}
	s.stop, s.cancel = context.WithCancel(context.Background())
	s.handler = s.routes()
	// Made here, not in Serve: a Shutdown that comes before Serve has
	// started (a signal during loading) must find it, and then Serve
	// returns at once.
	s.http = &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	return s
}

// SetModel makes the server ready: the API serves m from now on. The
// caller closes m after Shutdown.
func (s *Server) SetModel(m *modrun.Model) {
	s.info = m.Info()
	s.metrics.ready(m)
	s.model.Store(m)
}

// Handler is the server's HTTP handler (for a test's httptest.Server, or
// a program's own http.Server; Serve uses it).
func (s *Server) Handler() http.Handler { return s.handler }

// Serve accepts connections on l until Shutdown; it returns nil after a
// Shutdown and the listener's error otherwise.
func (s *Server) Serve(l net.Listener) error {
	if err := s.http.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// Shutdown stops accepting requests and waits for those in flight until
// ctx is done; then it cancels the generations still running (each ends
// within a token) and waits for their requests to return. It returns nil
// when every request finished by itself, and ctx's error when some were
// cancelled.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.cancel() // what still runs ends within a token
	<-done
	s.http.Close() // streams whose handlers returned, still open
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("server: shutdown: in-flight requests cancelled after the grace period: %w", err)
	}
	return err
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	allow := map[string][]string{} // path -> its methods, for a 405's Allow
	api := func(pattern string, h func(w http.ResponseWriter, r *http.Request, m *modrun.Model) (served, error)) {
		mux.Handle(pattern, s.logged(s.apiHandler(h)))
		method, path, _ := strings.Cut(pattern, " ")
		allow[path] = append(allow[path], method)
	}
	api("POST /v1/chat/completions", s.chatCompletions)
	api("POST /v1/completions", s.completions)
	api("POST /tokenize", s.tokenize)
	api("POST /detokenize", s.detokenize)
	api("GET /v1/models", s.models)
	mux.Handle("GET /health", s.logged(route(s.health)))
	mux.Handle("GET /metrics", s.logged(s.metrics.handler()))
	mux.Handle("GET /{$}", s.logged(webPage()))
	// Browsers ask for a favicon with every page: no content, not a 404
	// in the log.
	mux.Handle("GET /favicon.ico", s.logged(route(func(w http.ResponseWriter, r *http.Request) served {
		w.WriteHeader(http.StatusNoContent)
		return served{status: http.StatusNoContent}
	})))
	for _, p := range []string{"/health", "/metrics", "/", "/favicon.ico"} {
		allow[p] = append(allow[p], "GET", "HEAD")
	}
	mux.Handle("/", s.logged(route(func(w http.ResponseWriter, r *http.Request) served {
		if methods, ok := allow[r.URL.Path]; ok { // a known path, another method
			w.Header().Set("Allow", strings.Join(methods, ", "))
			return served{status: writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
				Message: fmt.Sprintf("%s %s: this endpoint takes %s", r.Method, r.URL.Path, strings.Join(methods, " or "))})}
		}
		return served{status: writeError(w, &apiError{Status: http.StatusNotFound, Type: "not_found_error", Message: fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path)})}
	})))
	return s.cors(mux)
}

// apiHandler wraps an API endpoint: the API key, the body limit, the
// model's readiness, the request counted in flight (Shutdown waits for it),
// and its error written as OpenAI's error object.
func (s *Server) apiHandler(h func(w http.ResponseWriter, r *http.Request, m *modrun.Model) (served, error)) route {
	return func(w http.ResponseWriter, r *http.Request) served {
		if s.cfg.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.cfg.APIKey {
			return served{status: writeError(w, &apiError{Status: http.StatusUnauthorized, Type: "authentication_error", Code: "invalid_api_key",
				Message: "a valid API key is required: Authorization: Bearer KEY (modrun serve --api-key)"})}
		}
		m := s.model.Load()
		if m == nil {
			return served{status: writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "loading", Message: "the model is loading"})}
		}
		s.inflight.Add(1)
		defer s.inflight.Done()
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
		used, err := h(w, r, m)
		if err != nil {
			used.status = writeError(w, err)
		}
		return used
	}
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) served {
	if s.model.Load() == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "loading"})
		return served{status: http.StatusServiceUnavailable}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return served{}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request, m *modrun.Model) (served, error) {
	type model struct {
		ID      string      `json:"id"`
		Object  string      `json:"object"`
		Created int64       `json:"created"`
		OwnedBy string      `json:"owned_by"`
		Meta    modelDetail `json:"meta"`
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []model{{
		ID: s.cfg.ModelName, Object: "model", Created: time.Now().Unix(), OwnedBy: "modrun", Meta: detail(s.info)}}})
	return served{}, nil
}

// modelDetail is /v1/models's extra about the model (clients ignore it).
type modelDetail struct {
	Arch         string `json:"arch"`
	ContextLen   int    `json:"context_length"`
	NVocab       int    `json:"n_vocab"`
	NLayer       int    `json:"n_layer"`
	RoutedLayers []int  `json:"routed_layers"`
	Backend      string `json:"backend"`
	Device       string `json:"device"`
}

func detail(i modrun.Info) modelDetail {
	return modelDetail{Arch: i.Arch, ContextLen: i.ContextLen, NVocab: i.NVocab, NLayer: i.NLayer,
		RoutedLayers: append([]int{}, i.RoutedLayers...), Backend: i.Backend, Device: i.Device}
}

// checkModel is a request's model name checked: any name goes, unless
// Config.StrictModel, where another model's name is OpenAI's 404.
func (s *Server) checkModel(name string) error {
	if !s.cfg.StrictModel || name == s.cfg.ModelName {
		return nil
	}
	return &apiError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("The model `%s` does not exist: this server serves %q (GET /v1/models; modrun serve --strict-model)", name, s.cfg.ModelName)}
}

// admit waits for a generation slot: at once when one is free, in the
// queue while it has room (until ctx is done), and otherwise not at all
// (503). release gives the slot back.
func (s *Server) admit(ctx context.Context) (release func(), err error) {
	release = func() { <-s.slots; s.metrics.active.Dec() }
	select {
	case s.slots <- struct{}{}:
		s.metrics.active.Inc()
		return release, nil
	default:
	}
	if s.queued.Add(1) > int64(s.cfg.Queue) {
		s.queued.Add(-1)
		return nil, &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "queue_full",
			Message:    fmt.Sprintf("the server is busy: %d requests generating and %d waiting (--parallel, --queue); retry later", s.cfg.Parallel, s.cfg.Queue),
			retryAfter: s.cfg.RetryAfter}
	}
	s.metrics.queue.Inc()
	defer func() { s.queued.Add(-1); s.metrics.queue.Dec() }()
	select {
	case s.slots <- struct{}{}:
		s.metrics.active.Inc()
		return release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// tryAdmit takes a generation slot if one is free now, and otherwise
// fails at once (no queueing: a prompt array's extra workers).
func (s *Server) tryAdmit(ctx context.Context) (release func(), err error) {
	select {
	case s.slots <- struct{}{}:
		s.metrics.active.Inc()
		return func() { <-s.slots; s.metrics.active.Dec() }, nil
	default:
		return nil, errors.New("server: no free slot")
	}
}

// requestContext is r's context, also cancelled when Shutdown's grace
// period ends.
func (s *Server) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.stop, cancel)
	return ctx, func() { stop(); cancel() }
}

func (s *Server) cors(next http.Handler) http.Handler {
	if s.cfg.CORS == "" {
		return next
	}
	preflight := s.logged(route(func(w http.ResponseWriter, r *http.Request) served {
		w.WriteHeader(http.StatusNoContent)
		return served{status: http.StatusNoContent}
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", s.cfg.CORS)
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
		h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
		if s.cfg.CORS != "*" {
			h.Add("Vary", "Origin")
		}
		if r.Method == http.MethodOptions {
			preflight.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// served is what a handler did, for the request's log line and /metrics:
// the status it answered (0: 200; a stream that failed after its 200 says
// how it ended: 499 for a client gone), and the tokens it ran.
type served struct{ status, prompt, completion int }

// route is a handler that says what it did.
type route func(w http.ResponseWriter, r *http.Request) served

func (h route) ServeHTTP(w http.ResponseWriter, r *http.Request) { h(w, r) }

// logged writes one line per request (method, path, status, tokens, ms),
// counts it in /metrics, and turns a handler's panic into a 500 for that
// request alone. A route says its status; another handler answers 200
// (the page, /metrics) or panics.
func (s *Server) logged(next http.Handler) http.Handler {
	h, ok := next.(route)
	if !ok {
		h = func(w http.ResponseWriter, r *http.Request) served { next.ServeHTTP(w, r); return served{} }
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var used served
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Printf("panic in %s %s: %v\n%s", r.Method, r.URL.Path, p, debug.Stack())
				// Where the handler had answered already (a stream), the
				// connection keeps that status and the error goes nowhere.
				used = served{status: writeError(w, &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: "internal error (logged by the server)"})}
			}
			status := used.status
			if status == 0 {
				status = http.StatusOK
			}
			ms := time.Since(start).Milliseconds()
			s.log.Printf("%s %s %d tokens=%d+%d %dms", r.Method, r.URL.Path, status, used.prompt, used.completion, ms)
			s.metrics.request(endpoint(r.URL.Path), status)
		}()
		used = h(w, r)
	})
}

// endpoint is the path's label in /metrics: a known path or "other", so
// that scanners cannot grow the label set.
func endpoint(path string) string {
	switch path {
	case "/v1/chat/completions", "/v1/completions", "/v1/models", "/tokenize", "/detokenize", "/health", "/metrics", "/", "/favicon.ico":
		return path
	}
	if strings.HasPrefix(path, "/v1/") {
		return "/v1/other"
	}
	return "other"
}

var idCounter atomic.Uint64
