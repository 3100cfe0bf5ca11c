package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"

	api "github.com/modrun/modrun"
	"github.com/modrun/modrun/tokenizer"
)

const chatArgs = "-m FILE.gguf [--system TEXT] [--chat-template NAME] [--print-prompt] [-n N] [--temp T] [--seed S] [--backend B] [--ctx N]"

// chatMain talks with a chat model: on a terminal, a prompt line per turn;
// with stdin piped, each line is a user turn.
func chatMain(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("chat", chatArgs, stderr)
	var gf generationFlags
	gf.register(fs)
	system := fs.String("system", "", "system message `TEXT` that opens the conversation")
	template := fs.String("chat-template", "", "chat template `NAME`: "+strings.Join(api.ChatTemplates(), " | ")+
		" (default: recognised from the file's tokenizer.chat_template)")
	printPrompt := fs.Bool("print-prompt", false, "print the prompt each turn feeds (the template's text, special tokens written out) before the reply")
	n := fs.Int("n", 256, "new tokens per reply at most (0 = until the model ends its turn or the context is full)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (the conversation comes on stdin)", errUsage, fs.Arg(0))
	}
	if *n < 0 {
		return fmt.Errorf("%w: -n %d: must be 0 or positive", errUsage, *n)
	}
	if *template != "" && !slices.Contains(api.ChatTemplates(), *template) {
		return fmt.Errorf("%w: --chat-template %q is unknown (known: %s)", errUsage, *template, strings.Join(api.ChatTemplates(), ", "))
	}
	model, so, err := gf.open(fs, stderr, func(opts *api.Options) { opts.NoRoutes = true })
	if err != nil {
		return err
	}
	defer model.Close()
	chat, err := model.NewChat(*template)
	if errors.Is(err, tokenizer.ErrNoChatTemplate) {
		return fmt.Errorf("%w with --chat-template", err)
	}
	if err != nil {
		return err
	}
	defer chat.Close()
	c := &chatLoop{chat: chat, gen: generateOptions(so, *n), printPrompt: *printPrompt, stdout: stdout, stderr: stderr}
	if *system != "" {
		c.system = []api.Message{{Role: api.RoleSystem, Content: *system}}
	}
	c.msgs = slices.Clone(c.system)
	if readerIsTerminal(stdin) {
		return c.interactive(stdin, model.Info().ContextLen)
	}
	return c.piped(stdin)
}

// chatLoop is one conversation on the command line.
type chatLoop struct {
	chat        *api.Chat
	gen         api.GenerateOptions
	printPrompt bool
	system      []api.Message // the --system message, if any
	msgs        []api.Message // the conversation so far
	stdout      io.Writer
	stderr      io.Writer
}

// lineMax bounds one line of input (one user turn).
const lineMax = 1 << 20

// piped reads one user turn per line until EOF.
func (c *chatLoop) piped(stdin io.Reader) error {
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 0, 64<<10), lineMax)
	for sc.Scan() {
		if err := c.line(context.Background(), sc.Text()); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading stdin: %w", err)
	}
	return nil
}

// interactive shows a prompt line per turn. Ctrl-C stops a reply; at the
// prompt it, Ctrl-D or /exit ends the chat.
func (c *chatLoop) interactive(stdin io.Reader, ctxLen int) error {
	fmt.Fprintf(c.stderr, "chat template %s, context %d tokens. /reset starts over, /exit (or Ctrl-D) quits; Ctrl-C stops a reply.\n",
		c.chat.Template(), ctxLen)
	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() { // a blocked read cannot be interrupted; it ends with the process
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 0, 64<<10), lineMax)
		for sc.Scan() {
			lines <- sc.Text()
		}
		readErr <- sc.Err()
		close(lines)
	}()
	interrupt := make(chan os.Signal, 1)
	signal.Notify(interrupt, os.Interrupt)
	defer signal.Stop(interrupt)
	for {
		fmt.Fprint(c.stdout, "> ")
		var line string
		select {
		case l, ok := <-lines:
			if !ok {
				fmt.Fprintln(c.stdout)
				if err := <-readErr; err != nil {
					return fmt.Errorf("reading stdin: %w", err)
				}
				return nil
			}
			line = l
		case <-interrupt:
			fmt.Fprintln(c.stdout)
			return nil
		}
		if strings.TrimSpace(line) == "/exit" {
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			select {
			case <-interrupt:
				cancel()
			case <-done:
			}
		}()
		err := c.line(ctx, line)
		close(done)
		cancel()
		if err != nil {
			return err
		}
	}
}

// line handles one line of input: a command or a user turn.
func (c *chatLoop) line(ctx context.Context, line string) error {
	line = strings.TrimSuffix(line, "\r")
	switch strings.TrimSpace(line) {
	case "":
		return nil
	case "/reset":
		c.msgs = slices.Clone(c.system)
		if err := c.chat.Reset(); err != nil {
			return err
		}
		fmt.Fprintln(c.stderr, "(conversation reset)")
		return nil
	}
	msgs := append(slices.Clone(c.msgs), api.Message{Role: api.RoleUser, Content: line})
	var werr error
	write := func(s string) {
		if werr == nil && s != "" {
			_, werr = io.WriteString(c.stdout, s)
		}
	}
	opts := api.ChatOptions{GenerateOptions: c.gen}
	if c.printPrompt {
		opts.OnPrompt = write
	}
	res, err := c.chat.Reply(ctx, msgs, opts, func(tk api.Token) error {
		if !tk.Prompt {
			write(tk.Text)
		}
		return werr
	})
	write(res.Tail + "\n")
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(c.stderr, "(reply stopped)")
	case err != nil:
		return err
	case res.Stop == api.StopContextFull:
		fmt.Fprintln(c.stderr, "(the conversation filled the context; /reset starts a new one, --ctx sets its length)")
	}
	c.msgs = append(msgs, api.Message{Role: api.RoleAssistant, Content: res.Reply})
	return werr
}

// readerIsTerminal says whether r is a terminal.
func readerIsTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && isTerminal(f)
}
