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
	"github.com/modrun/modrun/tokenizer"
)

// convertMain implements `modrun convert`: a checkpoint -> GGUF. The layout
// (train/'s, Meta or Hugging Face Llama, MoD Llama 2, the Mixture-AI
// wrapper) is detected and named.
func convertMain(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("convert", "-i CKPT.pt|CKPT.pth|CKPT.bin|CKPT.safetensors [-c config.json|params.json] --vocab VOCAB.gguf -o OUT.gguf [--type TYPE]", stderr)
	in := fs.String("i", "", "checkpoint: a torch.save state_dict (.pt, .pth, .bin) or .safetensors (required)")
	cfgPath := fs.String("c", "", "the checkpoint's config: train/'s JSON, Meta's params.json or Hugging Face's config.json (default: config.json, else params.json, beside the checkpoint)")
	vocabPath := fs.String("vocab", "", "GGUF whose tokenizer.* metadata the output gets (required)")
	out := fs.String("o", "", "output GGUF (required)")
	typ := fs.String("type", "f32", "type of the weight matrices: "+quant.Names()+" (q2_k, q3_k_s..q6_k: llama.cpp's mixes; norms and MoD tensors stay F32)")
	name := fs.String("name", "", "general.name (default: the output file's base name)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *in == "" || *vocabPath == "" || *out == "":
		return fmt.Errorf("%w: -i, --vocab and -o are required (modrun convert -h lists the flags)", errUsage)
	case fs.NArg() != 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	case filepath.Clean(*out) == filepath.Clean(*in) || filepath.Clean(*out) == filepath.Clean(*vocabPath) ||
		(*cfgPath != "" && filepath.Clean(*out) == filepath.Clean(*cfgPath)):
		return fmt.Errorf("%w: -o %s would overwrite an input", errUsage, *out)
	}
	scheme, err := quant.Parse(*typ)
	if err != nil {
		return fmt.Errorf("%w: --type: %v", errUsage, err)
	}
	if err := inputFile("-i", *in); err != nil {
		return err
	}
	if *cfgPath == "" {
		if *cfgPath = besideConfig(*in); *cfgPath == "" {
			return fmt.Errorf("%w: -c not given and neither config.json nor params.json exists beside %s", errUsage, *in)
		}
		if filepath.Clean(*out) == filepath.Clean(*cfgPath) {
			return fmt.Errorf("%w: -o %s would overwrite an input (the config beside -i)", errUsage, *out)
		}
	}
	if err := inputFile("-c", *cfgPath); err != nil {
		return err
	}
	if err := inputFile("--vocab", *vocabPath); err != nil {
		return err
	}
	if err := outputFile("-o", *out); err != nil {
		return err
	}
	if *name == "" {
		*name = strings.TrimSuffix(filepath.Base(*out), filepath.Ext(*out))
	}

	// The vocabulary is read before the checkpoint, which may take minutes.
	vocab, err := gguf.Open(*vocabPath)
	if err != nil {
		return fmt.Errorf("--vocab: %w", err)
	}
	defer vocab.Close()
	if _, err := tokenizer.FromGGUF(vocab); err != nil {
		return fmt.Errorf("--vocab %s: %w", *vocabPath, err)
	}
	src, err := convert.Load(*in, *cfgPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "layout %s: %s\n", src.Layout, src.Description)
	cfg := src.Config
	w, err := convert.Convert(src.Checkpoint, cfg, vocab, convert.Options{Scheme: scheme, Name: *name})
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
	fmt.Fprintf(stdout, "wrote %s (%s, %d tensors from %s)\n", *out, arch, len(src.Checkpoint.Tensors), *in)
	return nil
}

// besideConfig is the config file beside a checkpoint: config.json (train/
// and Hugging Face), else params.json (Meta); "" when neither exists.
func besideConfig(ckpt string) string {
	for _, name := range []string{"config.json", "params.json"} {
		p := filepath.Join(filepath.Dir(ckpt), name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}
