package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	api "github.com/modrun/modrun"
	"github.com/modrun/modrun/server"
	"github.com/modrun/modrun/tokenizer"
)

const serveArgs = "-m FILE.gguf [--host H] [--port P] [--parallel N] [--prefix-cache=false] [--queue N] [--ctx N] [--backend B] [--chat-template NAME] [--name ID] [--strict-model] [--api-key K] [--cors ORIGIN] [--shutdown-timeout D]"

// serveMain runs the OpenAI-compatible HTTP server until SIGINT or SIGTERM,
// then drains it (--shutdown-timeout) and exits 0.
func serveMain(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("serve", serveArgs, stderr)
	var mf modelFlags
	var cf cacheFlags
	mf.register(fs, "", "causal routing of MoD blocks: router | predictor (default: the one the model was trained for)")
	cf.register(fs)
	host := fs.String("host", "127.0.0.1", "listen on address `H` (0.0.0.0: every interface)")
	port := fs.Int("port", 8080, "listen on TCP port `P` (0: any free port, printed)")
	parallel := fs.Int("parallel", 1, "requests generating at once `N`, each one sequence: in shared steps on the CPU and Vulkan backends (reference: in turns)")
	prefix := fs.Bool("prefix-cache", true, "keep what requests ran for later prompts that begin with the same tokens (a system prompt, a conversation resent with one more message), also at --parallel 1, on the CPU and Vulkan backends; =false: every request runs its whole prompt")
	queue := fs.Int("queue", 0, "requests waiting for a slot `N` beyond --parallel, then 503 with Retry-After (0 = 4 x --parallel)")
	template := fs.String("chat-template", "", "chat template `NAME` for /v1/chat/completions: "+strings.Join(api.ChatTemplates(), " | ")+
		" (default: recognised from the file's tokenizer.chat_template)")
	apiKey := fs.String("api-key", "", "require `KEY` as a Bearer token on the API (401 otherwise; the page, /health and /metrics stay open)")
	cors := fs.String("cors", "", "allow browser pages from `ORIGIN` (\"*\" for any) to call the API")
	name := fs.String("name", "", "the model's id in /v1/models (default: the file's base name)")
	strict := fs.Bool("strict-model", false, "answer a request naming another model 404 model_not_found, as OpenAI does (default: serve any name, as llama-server does)")
	grace := fs.Duration("shutdown-timeout", 10*time.Second, "on SIGINT or SIGTERM, let requests in flight finish for `D`, then cancel them")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	switch {
	case *port < 0 || *port > 65535:
		return fmt.Errorf("%w: --port %d: must be in [0, 65535]", errUsage, *port)
	case *parallel < 1:
		return fmt.Errorf("%w: --parallel %d: must be 1 or more", errUsage, *parallel)
	case *queue < 0:
		return fmt.Errorf("%w: --queue %d: must be 0 (4 x --parallel) or more", errUsage, *queue)
	case *grace < 0:
		return fmt.Errorf("%w: --shutdown-timeout %v: must be 0 or more", errUsage, *grace)
	case *template != "" && !slices.Contains(api.ChatTemplates(), *template):
		return fmt.Errorf("%w: --chat-template %q is unknown (known: %s)", errUsage, *template, strings.Join(api.ChatTemplates(), ", "))
	}
	if err := cf.check(); err != nil {
		return err
	}
	opts, err := mf.options()
	if err != nil {
		return err
	}
	if err := cf.apiOptions(&opts); err != nil {
		return err
	}
	// --parallel sessions at once: in shared steps on the CPU and Vulkan
	// backends (batching); the reference backend's take turns.
	opts.Parallel, opts.PrefixCache = *parallel, *prefix
	if *name == "" {
		*name = strings.TrimSuffix(filepath.Base(mf.path), ".gguf")
	}

	// Signals first: a SIGTERM while the model loads still drains.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM)
	defer signal.Stop(sig)
	interruptHandler.Store(&sig) // main forwards each SIGINT here
	defer interruptHandler.Store(nil)

	l, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return fmt.Errorf("--host %s --port %d: %w", *host, *port, err)
	}
	srv := server.New(server.Config{ModelName: *name, ChatTemplate: *template, Parallel: *parallel, Queue: *queue,
		APIKey: *apiKey, CORS: *cors, Log: stderr, StrictModel: *strict})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	fmt.Fprintf(stderr, "modrun serve: http://%s (loading %s; /health says 503 until ready)\n", l.Addr(), mf.path)

	model, err := mf.open(opts, flagSet(fs, "routing"))
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return err
	}
	defer model.Close()
	if notice := model.Info().Notice; notice != "" {
		fmt.Fprintln(stderr, notice)
	}
	if t := model.Info().Tuning; t != "" {
		fmt.Fprintf(stderr, "modrun serve: tuning: %s (modrun tune)\n", t)
	}
	if _, err := model.NewChat(*template); errors.Is(err, tokenizer.ErrNoChatTemplate) {
		fmt.Fprintf(stderr, "modrun serve: %s has no chat template: /v1/chat/completions answers 400 (name one with --chat-template); /v1/completions works\n", mf.path)
	}
	srv.SetModel(model)
	info := model.Info()
	fmt.Fprintf(stderr, "modrun serve: ready: %s on %s, context %d, --parallel %d\n", *name, info.Device, info.ContextLen, *parallel)

	select {
	case err := <-served:
		return err
	case s := <-sig:
		fmt.Fprintf(stderr, "modrun serve: %v: draining (up to %v)\n", s, *grace)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		fmt.Fprintf(stderr, "modrun serve: %v\n", strings.TrimPrefix(err.Error(), "server: "))
	}
	fmt.Fprintln(stderr, "modrun serve: stopped")
	return nil
}
