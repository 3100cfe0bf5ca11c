package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/modrun/modrun/gguf"
)

// The tokenizer keys of the GGUF spec that inspect summarises.
const (
	keyTokModel  = "tokenizer.ggml.model"
	keyTokTokens = "tokenizer.ggml.tokens"
	keyTokScores = "tokenizer.ggml.scores"
	keyTokTypes  = "tokenizer.ggml.token_type"
)

// tokenTypeNames are llama.cpp's token types, as stored in tokenizer.ggml.token_type.
var tokenTypeNames = map[int32]string{0: "undefined", 1: "normal", 2: "unknown", 3: "control", 4: "user_defined", 5: "unused", 6: "byte"}

func inspectMain(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", "[--json [--full]] [--check] (FILE.gguf | -m FILE.gguf)", stderr)
	model := fs.String("m", "", "the GGUF `FILE` (or give it as the argument)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of text")
	full := fs.Bool("full", false, "with --json: include every element of long arrays (the vocabulary)")
	check := fs.Bool("check", false, "also scan every tensor (dequantized) for NaN and infinite values; exit 1 if any")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	path := *model
	switch {
	case path != "" && fs.NArg() > 0:
		return fmt.Errorf("%w: -m %s and the argument %q both name the file: give one", errUsage, path, fs.Arg(0))
	case path == "" && fs.NArg() != 1:
		return fmt.Errorf("%w: want one GGUF file (FILE.gguf or -m FILE.gguf), got %d arguments", errUsage, fs.NArg())
	case path == "":
		path = fs.Arg(0)
	}
	if *full && !*asJSON {
		return fmt.Errorf("%w: --full needs --json (the text report counts a long array's elements; --json --full lists them)", errUsage)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := newReport(f, *full)
	if *check {
		bad, err := checkFinite(f)
		if err != nil {
			return err
		}
		r.Check = &checkReport{NonFinite: bad}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil || r.Check == nil {
			return err
		}
		return checkError(f, r.Check.NonFinite)
	}
	if err := r.writeText(stdout); err != nil || r.Check == nil {
		return err
	}
	return writeCheck(stdout, f, r.Check.NonFinite)
}

// report is what inspect prints; its JSON form is the --json output.
type report struct {
	Path            string         `json:"path"`
	Size            int64          `json:"size"`
	Version         uint32         `json:"version"`
	Alignment       uint64         `json:"alignment"`
	Architecture    string         `json:"architecture"`
	Name            string         `json:"name,omitempty"`
	Hyperparameters []kvReport     `json:"hyperparameters"` // keys under "ARCH.", prefix kept
	Tokenizer       *tokReport     `json:"tokenizer,omitempty"`
	Metadata        []kvReport     `json:"metadata"` // every key, in file order
	Tensors         []tensorReport `json:"tensors"`
	TensorBytes     uint64         `json:"tensor_bytes"`
	Check           *checkReport   `json:"check,omitempty"` // --check only
}

type kvReport struct {
	Key   string `json:"key"`
	Type  string `json:"type"`          // "u32", "array of string", ...
	Len   *int   `json:"len,omitempty"` // arrays only
	Value any    `json:"value,omitempty"`
}

type tokReport struct {
	Model      string         `json:"model"`
	Tokens     int            `json:"tokens"`
	TypeCounts map[string]int `json:"type_counts,omitempty"`
	Special    []specialToken `json:"special"`
	AddBOS     *bool          `json:"add_bos_token,omitempty"`
	AddEOS     *bool          `json:"add_eos_token,omitempty"`
}

type specialToken struct {
	Role  string `json:"role"` // "bos", "eos", ...
	ID    uint64 `json:"id"`
	Piece string `json:"piece,omitempty"`
}

type tensorReport struct {
	Name   string   `json:"name"`
	Type   string   `json:"type"`
	Shape  []uint64 `json:"shape"` // ggml order: shape[0] is the contiguous dimension
	Bytes  uint64   `json:"bytes"`
	Offset uint64   `json:"offset"` // from the start of the file
}

// maxInlineArray is the longest array printed in full (without --full).
const maxInlineArray = 16

func newReport(f *gguf.File, full bool) *report {
	r := &report{Path: f.Path, Size: f.Size(), Version: f.Version, Alignment: f.Alignment,
		Architecture: f.Architecture(), Hyperparameters: []kvReport{}, Metadata: []kvReport{}, Tensors: []tensorReport{}}
	r.Name, _ = f.String("general.name")
	for _, kv := range f.KVs {
		kr := describeKV(kv, full)
		r.Metadata = append(r.Metadata, kr)
		if r.Architecture != "" && strings.HasPrefix(kv.Key, r.Architecture+".") {
			r.Hyperparameters = append(r.Hyperparameters, kr)
		}
	}
	r.Tokenizer = tokenizerReport(f)
	for _, t := range f.Tensors {
		r.Tensors = append(r.Tensors, tensorReport{Name: t.Name, Type: t.Type.String(), Shape: t.Dims,
			Bytes: t.Size, Offset: uint64(f.DataOffset) + t.Offset})
		r.TensorBytes += t.Size
	}
	return r
}

func describeKV(kv gguf.KV, full bool) kvReport {
	v := kv.Value
	kr := kvReport{Key: kv.Key, Type: v.Type().String()}
	if v.Type() != gguf.TypeArray {
		kr.Value = finite(v.Interface())
		return kr
	}
	kr.Type = "array of " + v.ElemType().String()
	n := v.Len()
	kr.Len = &n
	if full || n <= maxInlineArray {
		kr.Value = arrayJSON(v)
	}
	return kr
}

// arrayJSON turns an array value into something encoding/json can print,
// nested arrays included.
func arrayJSON(v gguf.Value) any {
	inner, ok := v.Interface().([]gguf.Value)
	if !ok {
		return finite(v.Interface())
	}
	out := make([]any, len(inner))
	for i, e := range inner {
		out[i] = arrayJSON(e)
	}
	return out
}

// finite replaces NaN and infinite floats, which JSON cannot hold, by their
// names as strings ("NaN", "+Inf").
func finite(x any) any {
	switch v := x.(type) {
	case float32:
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Sprint(v)
		}
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Sprint(v)
		}
	case []float32:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = finite(e)
		}
		return out
	case []float64:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = finite(e)
		}
		return out
	}
	return x
}

func tokenizerReport(f *gguf.File) *tokReport {
	model, err := f.String(keyTokModel)
	if err != nil {
		return nil
	}
	tr := &tokReport{Model: model, Special: []specialToken{}}
	tokens, _ := f.Strings(keyTokTokens)
	tr.Tokens = len(tokens)
	if types, err := f.Int32s(keyTokTypes); err == nil {
		tr.TypeCounts = map[string]int{}
		for _, t := range types {
			name, ok := tokenTypeNames[t]
			if !ok {
				name = fmt.Sprintf("type %d", t)
			}
			tr.TypeCounts[name]++
		}
	}
	for _, kv := range f.KeysWithPrefix("tokenizer.ggml.") {
		role, ok := strings.CutSuffix(strings.TrimPrefix(kv.Key, "tokenizer.ggml."), "_token_id")
		if !ok {
			continue
		}
		id, err := kv.Value.Uint()
		if err != nil {
			continue
		}
		st := specialToken{Role: role, ID: id}
		if id < uint64(len(tokens)) {
			st.Piece = tokens[id]
		}
		tr.Special = append(tr.Special, st)
	}
	if b, err := f.Bool("tokenizer.ggml.add_bos_token"); err == nil {
		tr.AddBOS = &b
	}
	if b, err := f.Bool("tokenizer.ggml.add_eos_token"); err == nil {
		tr.AddEOS = &b
	}
	return tr
}

func (r *report) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "file:\t%s (%s, GGUF v%d, alignment %d)\n", r.Path, humanBytes(uint64(r.Size)), r.Version, r.Alignment)
	fmt.Fprintf(tw, "architecture:\t%s\n", orNone(r.Architecture))
	if r.Name != "" {
		fmt.Fprintf(tw, "name:\t%s\n", r.Name)
	}
	tw.Flush()
	shown := map[string]bool{}
	if len(r.Hyperparameters) > 0 {
		fmt.Fprintf(w, "\nhyperparameters:\n")
		for _, kv := range r.Hyperparameters {
			fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimPrefix(kv.Key, r.Architecture+"."), kv.text())
			shown[kv.Key] = true
		}
		tw.Flush()
	}
	if t := r.Tokenizer; t != nil {
		fmt.Fprintf(w, "\ntokenizer: %s, %d tokens%s\n", t.Model, t.Tokens, typeCountsText(t.TypeCounts))
		for _, s := range t.Special {
			piece := fmt.Sprintf("%q", s.Piece)
			if s.ID >= uint64(t.Tokens) {
				piece = "(not a token: none)"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\n", s.Role, s.ID, piece)
			shown["tokenizer.ggml."+s.Role+"_token_id"] = true
		}
		for _, flag := range []struct {
			key string
			b   *bool
		}{{"add_bos_token", t.AddBOS}, {"add_eos_token", t.AddEOS}} {
			if flag.b != nil {
				fmt.Fprintf(tw, "  %s\t%v\n", flag.key, *flag.b)
				shown["tokenizer.ggml."+flag.key] = true
			}
		}
		tw.Flush()
		for _, k := range []string{keyTokModel, keyTokTokens, keyTokScores, keyTokTypes} {
			shown[k] = true
		}
	}
	fmt.Fprintf(w, "\nother metadata:\n")
	for _, kv := range r.Metadata {
		if !shown[kv.Key] {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", kv.Key, kv.Type, kv.text())
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\ntensors: %d, %s%s\n", len(r.Tensors), humanBytes(r.TensorBytes), typeSummary(r.Tensors))
	if len(r.Tensors) == 0 {
		return nil
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  name\ttype\tshape (ggml order)\tbytes\n")
	for _, t := range r.Tensors {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\n", t.Name, t.Type, shapeText(t.Shape), t.Bytes)
	}
	return tw.Flush()
}

// text renders a value for the text report, arrays shortened.
func (kv kvReport) text() string {
	if kv.Len == nil {
		if s, ok := kv.Value.(string); ok {
			return fmt.Sprintf("%q", s)
		}
		return fmt.Sprint(kv.Value)
	}
	if kv.Value != nil && *kv.Len <= maxInlineArray {
		return fmt.Sprintf("%v", kv.Value)
	}
	return fmt.Sprintf("[%d elements]", *kv.Len)
}

func typeCountsText(counts map[string]int) string {
	if len(counts) == 0 {
		return ""
	}
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%d %s", counts[n], n)
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func typeSummary(ts []tensorReport) string {
	counts := map[string]int{}
	for _, t := range ts {
		counts[t.Type]++
	}
	return typeCountsText(counts)
}

func shapeText(dims []uint64) string {
	parts := make([]string, len(dims))
	for i, d := range dims {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
