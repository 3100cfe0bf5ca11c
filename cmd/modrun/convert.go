package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod/convert"
	"github.com/modrun/modrun/mod/quant"
)

// convertMain implements `modrun convert`: a checkpoint of train/ -> GGUF.
func convertMain(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("convert", "-i CKPT.pt|CKPT.safetensors [-c config.json] --vocab VOCAB.gguf -o OUT.gguf [--type TYPE]", stderr)
	in := fs.String("i", "", "checkpoint: a torch.save state_dict (.pt) or .safetensors (required)")
	cfgPath := fs.String("c", "", "config JSON written by train/ (default: config.json beside the checkpoint)")
	vocabPath := fs.String("vocab", "", "GGUF whose tokenizer.* metadata the output gets (required)")
	out := fs.String("o", "", "output GGUF (required)")
	typ := fs.String("type", "f32", "type of the weight matrices: "+quant.Names()+" (q2_k, q3_k_s..q6_k: llama.cpp's mixes; norms and MoD tensors stay F32)")
	name := fs.String("name", "", "general.name (default: the output file's base name)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *in == "" || *vocabPath == "" || *out == "":
		fs.Usage()
		return fmt.Errorf("%w: -i, --vocab and -o are required", errUsage)
	case fs.NArg() != 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	case filepath.Clean(*out) == filepath.Clean(*in) || filepath.Clean(*out) == filepath.Clean(*vocabPath):
		return fmt.Errorf("%w: -o %s would overwrite an input", errUsage, *out)
	}
	scheme, err := quant.Parse(*typ)
	if err != nil {
		return fmt.Errorf("%w: --type: %v", errUsage, err)
	}
	if *cfgPath == "" {
		*cfgPath = filepath.Join(filepath.Dir(*in), "config.json")
		if _, err := os.Stat(*cfgPath); err != nil {
			return fmt.Errorf("%w: -c not given and %s does not exist", errUsage, *cfgPath)
		}
	}
	if *name == "" {
		*name = strings.TrimSuffix(filepath.Base(*out), filepath.Ext(*out))
	}

	ck, err := convert.LoadCheckpoint(*in)
	if err != nil {
		return err
	}
	if err := convert.CheckLayout(ck); err != nil {
		return err // before the config: that layout comes without one
	}
	cfg, err := convert.LoadConfig(*cfgPath)
	if err != nil {
		return err
	}
	vocab, err := gguf.Open(*vocabPath)
	if err != nil {
		return fmt.Errorf("--vocab: %w", err)
	}
	defer vocab.Close()
	w, err := convert.Convert(ck, cfg, vocab, convert.Options{Scheme: scheme, Name: *name})
	if err != nil {
		return err
	}
	if err := w.WriteFile(*out); err != nil {
		return fmt.Errorf("-o %s: %w", *out, err)
	}
	arch := "llama"
	if len(cfg.RoutedLayers) > 0 {
		arch = fmt.Sprintf("llama-mod, routed layers %v", cfg.RoutedLayers)
	}
	fmt.Fprintf(stdout, "wrote %s (%s, %d tensors from %s)\n", *out, arch, len(ck.Tensors), *in)
	return nil
}
