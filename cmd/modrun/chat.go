package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	api "github.com/modrun/modrun"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/tokenizer"
)

const chatArgs = "-m FILE.gguf [--system TEXT] [--chat-template NAME] [--print-prompt] [--parse-special] [--stop TEXT] [-n N] [--temp T] [--seed S] [-t N] [--backend B] [--ctx N]"

// chatMain talks with a chat model: on a terminal, a prompt line per turn;
// with stdin piped, each line is a user turn.
func chatMain(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	g := newGenerationCommand("chat", chatArgs, "new tokens per reply at most (0, or llama.cpp's -1, = until the model ends its turn or the context is full)",
		"read special-token text in --system, such as <|eot_id|>, as those tokens (what is typed stays plain text always)", stderr)
	fs := g.fs
	system := fs.String("system", "", "system message `TEXT` that opens the conversation")
	template := fs.String("chat-template", "", "chat template `NAME`: "+strings.Join(api.ChatTemplates(), " | ")+
		" (default: recognised from the file's tokenizer.chat_template)")
	printPrompt := fs.Bool("print-prompt", false, "print the prompt each turn feeds (the template's text, special tokens written out) before the reply")
	if err := g.parse(args, "the conversation comes on stdin"); err != nil {
		return err
	}
	if *template != "" && !slices.Contains(api.ChatTemplates(), *template) {
		return fmt.Errorf("%w: --chat-template %q is unknown (known: %s)", errUsage, *template, strings.Join(api.ChatTemplates(), ", "))
	}
	model, gen, err := g.open(stderr, nil, func(opts *api.Options) error {
		opts.NoRoutes = true
		return fileChatTemplate(g.gf.mf.path, *template) // before the model loads
	})
	if err != nil {
		return err
	}
	defer model.Close()
	chat, err := model.NewChat(*template)
	if err != nil {
		return err
	}
	defer chat.Close()
	c := &chatLoop{chat: chat, gen: gen, printPrompt: *printPrompt, specialSystem: g.parseSpecial, stdout: stdout, stderr: stderr}
	if *system != "" {
		c.system = []api.Message{{Role: api.RoleSystem, Content: *system}}
	}
	c.msgs = slices.Clone(c.system)
	if readerIsTerminal(stdin) {
		interrupt := make(chan os.Signal, 1)
		interruptHandler.Store(&interrupt) // main forwards each ^C here
		defer interruptHandler.Store(nil)
		return c.interactive(stdin, interrupt, model.Info().ContextLen)
	}
	return c.piped(interrupt, stdin)
}

// fileChatTemplate checks, before the model loads, that the chat has a
// template: named, or one the file carries and modrun recognises.
func fileChatTemplate(path, name string) error {
	if name != "" {
		return nil
	}
	f, err := gguf.Open(path)
	if err != nil {
		return fmt.Errorf("-m %s: %w", path, err)
	}
	defer f.Close()
	if !f.Has(tokenizer.KeyChatTemplate) {
		return fmt.Errorf("%s: %w; name one (%s) with --chat-template", path, tokenizer.ErrNoChatTemplate, strings.Join(api.ChatTemplates(), ", "))
	}
	jinja, err := f.String(tokenizer.KeyChatTemplate)
	if err == nil {
		_, err = tokenizer.DetectChatTemplate(jinja)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// chatLoop is one conversation on the command line.
type chatLoop struct {
	chat          *api.Chat
	gen           api.GenerateOptions // with --stop's strings: the API keeps them from the reply
	printPrompt   bool
	specialSystem bool          // --parse-special
	system        []api.Message // the --system message, if any
	msgs          []api.Message // the conversation so far
	stdout        io.Writer
	stderr        io.Writer
}

// errExit is what line returns for /exit.
var errExit = errors.New("/exit")

// lineMax bounds one line of input (one user turn).
const lineMax = 1 << 20

// piped reads one user turn per line until EOF or /exit. An interrupt
// during a reply (ctx done) ends the reply's line, then modrun; at any
// other time it ends modrun at once.
func (c *chatLoop) piped(ctx context.Context, stdin io.Reader) error {
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 0, 64<<10), lineMax)
	for sc.Scan() {
		watchingInterrupt.Store(true)
		err := c.line(ctx, sc.Text())
		watchingInterrupt.Store(false)
		if errors.Is(err, errExit) {
			return nil
		}
		if ctx.Err() != nil {
			return errInterrupted
		}
		if err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading stdin: %w", err)
	}
	return nil
}

// interactive shows a prompt line per turn. An interrupt (Ctrl-C) stops a
// reply; at the prompt it, Ctrl-D or /exit ends the chat.
func (c *chatLoop) interactive(stdin io.Reader, interrupt <-chan os.Signal, ctxLen int) error {
	fmt.Fprintf(c.stderr, "chat template %s, context %d tokens. /reset starts over, /exit (or Ctrl-D) quits; Ctrl-C stops a reply.\n",
		c.chat.Template(), ctxLen)
	lines := make(chan string)
	readErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a blocked read cannot be interrupted; it ends with the process
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 0, 64<<10), lineMax)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-stop:
				return
			}
		}
		readErr <- sc.Err()
		close(lines)
	}()
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
		if errors.Is(err, errExit) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// line handles one line of input: a command or a user turn. A turn that
// cannot fit in the context is refused with a line on stderr; the chat
// goes on.
func (c *chatLoop) line(ctx context.Context, line string) error {
	line = strings.TrimSuffix(line, "\r")
	switch strings.TrimSpace(line) {
	case "":
		return nil
	case "/exit":
		return errExit
	case "/reset":
		c.msgs = slices.Clone(c.system)
		if err := c.chat.Reset(); err != nil {
			return err
		}
		fmt.Fprintln(c.stderr, "(conversation reset)")
		return nil
	}
	if !utf8.ValidString(line) {
		// One bad line (a Latin-1 file piped in) costs its turn, not the chat;
		// the offset is in what was typed, not in the template's text.
		bad := len(line)
		for i, r := range line {
			if r == utf8.RuneError {
				if _, size := utf8.DecodeRuneInString(line[i:]); size == 1 {
					bad = i
					break
				}
			}
		}
		fmt.Fprintf(c.stderr, "(the line is not valid UTF-8 at byte %d of what was typed; the turn was not sent)\n", bad)
		return nil
	}
	msgs := append(slices.Clone(c.msgs), api.Message{Role: api.RoleUser, Content: line})
	var werr error
	write := func(s string) {
		if werr == nil && s != "" {
			_, werr = io.WriteString(c.stdout, s)
		}
	}
	opts := api.ChatOptions{GenerateOptions: c.gen, SpecialSystem: c.specialSystem}
	if c.printPrompt {
		opts.OnPrompt = write
	}
	opts.OnShift = func(dropped int) {
		kept := "the last message"
		if n := len(msgs) - len(c.system) - dropped; n != 1 {
			kept = fmt.Sprintf("the last %d messages", n)
		}
		if len(c.system) > 0 {
			kept = "the system message and " + kept
		}
		fmt.Fprintf(c.stderr, "(the context is full: dropped the oldest %s, kept %s)\n", count(dropped, "message"), kept)
	}
	res, err := c.chat.Reply(ctx, msgs, opts, func(tk api.Token) error {
		if !tk.Prompt {
			write(tk.Text)
		}
		return werr
	})
	if errors.Is(err, api.ErrTurnTooLong) {
		fmt.Fprintf(c.stderr, "(%s; the turn was not sent: shorten it, or raise --ctx)\n", strings.TrimPrefix(err.Error(), "modrun: chat: "))
		return nil
	}
	write(res.Tail)
	write("\n")
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(c.stderr, "(reply stopped)")
	case err != nil:
		return err
	case res.Stop == api.StopContextFull:
		fmt.Fprintln(c.stderr, "(the reply filled the context; the next turn drops the oldest ones, /reset starts a new conversation, --ctx sets its length)")
	}
	// The conversation goes on with the reply as printed: after a stop
	// string, without it and what was drawn after it (the next turn then
	// runs the conversation again from its start: the session holds the
	// tokens drawn).
	c.msgs = append(msgs, api.Message{Role: api.RoleAssistant, Content: res.Reply})
	return werr
}

// readerIsTerminal says whether r is a terminal.
func readerIsTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && isTTY(f)
}
