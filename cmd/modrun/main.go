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
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
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
		switch {
		case err == nil:
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
		fmt.Fprintf(stderr, "Usage: modrun %s %s\n", name, argsUsage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, wrapping a bad flag as a usage error. The flag
// package's own report (its message and every flag) is silenced: the error
// comes back as one line under the "modrun COMMAND:" prefix, and -h prints
// the flags.
func parseFlags(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	case err != nil:
		return fmt.Errorf("%w: %v (modrun %s -h lists the flags)", errUsage, err, fs.Name())
	}
	return nil
}
