// Command modrun runs Mixture-of-Depths Llama models from GGUF files.
//
// This file is wiring only: it picks the subcommand and reports its error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// command is one subcommand: it parses its own flags from args.
type command struct {
	name, summary string
	run           func(args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

var commands = []command{
	{"run", "generate text: modrun [run] -m FILE.gguf -p PROMPT (the default command)", generateMain},
	{"chat", "talk with a chat model: a prompt line per turn, or one turn per line of piped stdin", chatMain},
	{"perplexity", "score a text file: NLL per token and perplexity", perplexityMain},
	{"serve", "an OpenAI-compatible HTTP server with a web page of the live routing map", serveMain},
	{"bench", "prefill and decode tokens/s per model and backend, validated first", benchMain},
	{"tune", "time the Vulkan engine's kernel choices for a model on this device and keep the fastest", tuneMain},
	{"inspect", "print a GGUF file's metadata, tokenizer and tensors", inspectMain},
	{"tokenize", "text on stdin -> token ids (or ids -> text with --decode)", tokenizeMain},
	{"devices", "list the Vulkan devices, their limits and features", devicesMain},
	{"convert", "a checkpoint (train/'s, the public MoD code's, Meta's or Hugging Face's Llama) + its config -> GGUF", convertMain},
}

// errUsage marks an error in how modrun was called (exit status 2).
var errUsage = errors.New("usage")

// Exit statuses: 0 done, 1 an error in the work, 2 a usage error (a bad
// flag, caught before anything is loaded), 130 interrupted (128 + SIGINT, as
// shells report it).
const exitInterrupted = 130

// errInterrupted is what a command returns when it stopped on interrupt.
var errInterrupted = errors.New("interrupted")

// interrupt is cancelled by the first SIGINT. A command that watches it
// sets watchingInterrupt while it does (run, while it generates) and stops
// cleanly; at any other time the first SIGINT ends modrun at once.
//
// A command that handles every SIGINT itself (chat on a terminal) sets
// interruptHandler instead: main then forwards each SIGINT to it.
var (
	interrupt         = context.Background()
	watchingInterrupt atomic.Bool
	interruptHandler  atomic.Pointer[chan os.Signal]
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	interrupt = ctx
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt)
	var once sync.Once
	exit := func(newline bool) {
		once.Do(func() {
			if newline && isTTY(os.Stderr) {
				fmt.Fprintln(os.Stderr) // end a progress bar's line
			}
			fmt.Fprintln(os.Stderr, "modrun: interrupted")
			os.Exit(exitInterrupted)
		})
	}
	go func() {
		first := true
		for s := range sig {
			if h := interruptHandler.Load(); h != nil {
				select { // chat: ^C stops the reply, not the program
				case *h <- s:
				default:
				}
				continue
			}
			if !first || !watchingInterrupt.Load() {
				cancel()
				exit(true) // a second ^C does not wait for the command
			}
			first = false
			cancel()
		}
	}()
	code := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	if code == exitInterrupted {
		exit(false)
	}
	os.Exit(code)
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout) // asked for: `modrun -h | less` shows it
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" || args[0] == "version" {
		printVersion(stdout)
		return 0
	}
	if strings.HasPrefix(args[0], "-") {
		args = append([]string{"run"}, args...) // modrun -m FILE -p PROMPT
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdin, stdout, stderr)
		var help *helpError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &help):
			help.fs.SetOutput(stdout)
			help.fs.Usage()
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errInterrupted):
			return exitInterrupted // main prints the line
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "modrun %s: %v\n", c.name, err)
			return 2
		}
		// The API's errors start "modrun: ", which the line has said already.
		fmt.Fprintf(stderr, "modrun %s: %s\n", c.name, strings.TrimPrefix(err.Error(), "modrun: "))
		return 1
	}
	fmt.Fprintf(stderr, "modrun: unknown command %q (modrun -h lists the commands)\n", args[0])
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "modrun runs Mixture-of-Depths Llama models from GGUF files.")
	fmt.Fprintln(w, "\nUsage: modrun -m FILE.gguf -p PROMPT [flags]   (generate; modrun run -h for the flags)")
	fmt.Fprintln(w, "       modrun COMMAND [flags]                (modrun COMMAND -h for its flags)")
	fmt.Fprintln(w, "       modrun --version")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
}

// newFlags makes a flag set that reports errors instead of exiting, with a
// usage line naming the command and its arguments.
func newFlags(name, argsUsage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: modrun %s %s\n", name, argsUsage)
		fs.PrintDefaults()
		if len(llamaNames(fs)) > 0 {
			fmt.Fprintf(fs.Output(), "  llama.cpp's names work too: %s\n", strings.Join(llamaNames(fs), ", "))
		}
	}
	return fs
}

// helpError is -h's: run prints fs's usage to stdout (asked for, it is the
// output, and `modrun run -h | less` shows it).
type helpError struct{ fs *flag.FlagSet }

func (h *helpError) Error() string { return "help requested" }
func (h *helpError) Unwrap() error { return flag.ErrHelp }

// llamaAliases are llama.cpp's names for modrun's flags, read as those
// where the command has the flag: a llama.cpp command line works as typed.
var llamaAliases = map[string]string{
	"model": "m", "prompt": "p", "n-predict": "n", "predict": "n", "ctx-size": "ctx",
	"threads": "t", "file": "f", "batch-size": "ubatch", "b": "ubatch", "ubatch-size": "ubatch", "ub": "ubatch", "s": "seed",
	"n-gpu-layers": "ngl", "gpu-layers": "ngl",
}

// llamaNames lists the aliases fs reads, as "--model (-m)".
func llamaNames(fs *flag.FlagSet) []string {
	names := make([]string, 0, len(llamaAliases))
	for a := range llamaAliases {
		names = append(names, a)
	}
	slices.Sort(names)
	var out []string
	for _, a := range names {
		if fs.Lookup(a) == nil && fs.Lookup(llamaAliases[a]) != nil {
			out = append(out, fmt.Sprintf("%s (%s)", dashed(a), dashed(llamaAliases[a])))
		}
	}
	return out
}

// dashed is a flag's name as it is written: -m, --ctx.
func dashed(name string) string {
	if len(name) == 1 || name == "ngl" || name == "ub" { // llama.cpp writes -ngl and -ub with one dash

		return "-" + name
	}
	return "--" + name
}

// parseFlags parses args, wrapping a bad flag as a usage error. Flags may
// come after positional arguments (`inspect FILE --json`), as in llama.cpp
// and most CLIs; after "--" everything is positional. llama.cpp's names
// (llamaAliases) are read as modrun's. The flag package's own report (its
// message and every flag) is silenced: the error comes back as one line
// under the "modrun COMMAND:" prefix naming the flag as it was typed, and
// -h prints the flags.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	defer fs.SetOutput(out)
	args, typed := canonicalFlags(fs, args)
	typedFlags.Store(fs, typed)
	var positional []string
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			return &helpError{fs}
		case err != nil:
			msg := err.Error()
			for name, as := range typed { // the flag package writes every flag with one dash
				msg = replaceFlag(msg, "-"+name, as)
			}
			return fmt.Errorf("%w: %s (modrun %s -h lists the flags)", errUsage, msg, fs.Name())
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" { // all positional
			positional = append(positional, rest...)
			break
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
	// Parse again to leave the positional arguments in fs.Args().
	return fs.Parse(append([]string{"--"}, positional...))
}

// typedFlags holds, per flag set parsed, how each flag was typed
// (canonicalFlags), for the commands' own errors about a flag's value.
var typedFlags sync.Map // *flag.FlagSet -> map[string]string

// asTyped is flag name as the user typed it ("--n-predict" for -n), or
// as modrun writes it when it was not given.
func asTyped(fs *flag.FlagSet, name string) string {
	if m, ok := typedFlags.Load(fs); ok {
		if typed, ok := m.(map[string]string)[name]; ok {
			return typed
		}
	}
	return dashed(name)
}

// replaceFlag replaces flag (as "-name") in msg by as, where it stands as
// a whole word.
func replaceFlag(msg, flag, as string) string {
	for i := 0; i+len(flag) <= len(msg); i++ {
		if msg[i:i+len(flag)] != flag || (i > 0 && msg[i-1] != ' ') {
			continue
		}
		if end := i + len(flag); end == len(msg) || !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz-", rune(msg[end])) {
			return msg[:i] + as + msg[end:]
		}
	}
	return msg
}

// canonicalFlags rewrites llama.cpp's flag names in args to modrun's and
// returns, for each flag given, how it was typed ("--model", "-n"). It
// follows the flag package's reading: a flag that is not boolean takes the
// next argument as its value (even "-1"), and "--" ends the flags.
func canonicalFlags(fs *flag.FlagSet, args []string) ([]string, map[string]string) {
	out := slices.Clone(args)
	typed := map[string]string{}
	for i := 0; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' {
			continue
		}
		dashes := "-"
		if strings.HasPrefix(a, "--") {
			dashes = "--"
		}
		name, value, hasValue := strings.Cut(a[len(dashes):], "=")
		if fs.Lookup(name) == nil {
			if target, ok := llamaAliases[name]; ok && fs.Lookup(target) != nil {
				name = target
				out[i] = "-" + target
				if hasValue {
					out[i] += "=" + value
				}
			}
		}
		if _, seen := typed[name]; !seen {
			typed[name] = dashes + a[len(dashes):len(dashes)+len(strings.SplitN(a[len(dashes):], "=", 2)[0])]
		}
		f := fs.Lookup(name)
		if f == nil || hasValue {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		i++ // its value
	}
	return out, typed
}
