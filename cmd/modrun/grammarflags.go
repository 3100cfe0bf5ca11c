package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	api "github.com/modrun/modrun"
)

// grammarFlags are --grammar and --json-schema of run and chat: the
// generated text kept inside a GBNF grammar or a JSON schema's JSON.
type grammarFlags struct {
	file   string // --grammar
	schema string // --json-schema: a file, or the schema's JSON itself
	g      *api.Grammar
}

func registerGrammarFlags(fs *flag.FlagSet) *grammarFlags {
	gf := &grammarFlags{}
	fs.StringVar(&gf.file, "grammar", "", "keep the generated text inside the GBNF grammar (llama.cpp's format) in `FILE`")
	fs.StringVar(&gf.schema, "json-schema", "", "generate JSON valid against a JSON schema: a `FILE`, or the schema itself ({...})")
	return gf
}

// compile reads and compiles the grammar the flags name (none: nil).
func (gf *grammarFlags) compile() error {
	switch {
	case gf.file != "" && gf.schema != "":
		return fmt.Errorf("%w: --grammar and --json-schema: give one", errUsage)
	case gf.file != "":
		src, err := os.ReadFile(gf.file)
		if err != nil {
			return fmt.Errorf("--grammar: %w", err)
		}
		if gf.g, err = api.ParseGrammar(string(src)); err != nil {
			return fmt.Errorf("--grammar %s: %w", gf.file, err)
		}
	case gf.schema != "":
		text := []byte(gf.schema)
		if !strings.HasPrefix(strings.TrimSpace(gf.schema), "{") {
			var err error
			if text, err = os.ReadFile(gf.schema); err != nil {
				return fmt.Errorf("--json-schema: %w", err)
			}
		}
		g, err := api.JSONSchemaGrammar(text)
		if err != nil {
			return fmt.Errorf("--json-schema %s: %w", gf.schema, err)
		}
		gf.g = g
	}
	return nil
}
