package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/tokenizer"
)

// tokenizeMain implements `modrun tokenize`. All of stdin is one text (a
// trailing newline included: it is part of the text and gets its token), so
// that `modrun tokenize | modrun tokenize --decode` gives back the input.
func tokenizeMain(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", "-m FILE.gguf [--bos] [--parse-special] [--pieces | --out ids.bin | --decode [--special]] < input", stderr)
	model := fs.String("m", "", "GGUF file whose tokenizer to use (required)")
	decode := fs.Bool("decode", false, "read token ids on stdin and print the text")
	special := fs.Bool("special", false, "with --decode: write control tokens (BOS, EOS, <|eot_id|>) as their text instead of dropping them")
	out := fs.String("out", "", "write ids as raw little-endian uint16 (uint32 when the vocab exceeds 65536) to this file")
	bos := fs.Bool("bos", false, "prepend the BOS token")
	parseSpecial := fs.Bool("parse-special", false, "read special-token text such as <s> or <|eot_id|> as those tokens (default: plain text)")
	pieces := fs.Bool("pieces", false, "print one token a line: its id, a tab and its text, quoted")
	sep := fs.String("sep", "", "the input is documents separated by `TEXT`, each tokenized on its own (with --bos, each BOS-first) and their ids joined: one process for a corpus of stories")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *model == "":
		return fmt.Errorf("%w: -m FILE.gguf is required", errUsage)
	case fs.NArg() != 0:
		return fmt.Errorf("%w: unexpected argument %q (text comes on stdin)", errUsage, fs.Arg(0))
	case *decode && (*out != "" || *bos || *parseSpecial || *pieces):
		return fmt.Errorf("%w: --decode takes none of --out, --bos, --parse-special, --pieces", errUsage)
	case *special && !*decode:
		return fmt.Errorf("%w: --special goes with --decode (to encode special-token text as tokens, use --parse-special)", errUsage)
	case *decode && *sep != "":
		return fmt.Errorf("%w: --sep splits text to encode; --decode reads ids", errUsage)
	case *pieces && *out != "":
		return fmt.Errorf("%w: --pieces prints, --out writes a file: use one", errUsage)
	}
	if err := inputFile("-m", *model); err != nil {
		return err
	}
	if *out != "" {
		if err := outputFile("--out", *out); err != nil {
			return err
		}
	}

	tok, err := loadTokenizer(*model)
	if err != nil {
		return err
	}
	input, err := io.ReadAll(stdin)
	if err != nil {
		return fmt.Errorf("reading stdin: %w", err)
	}
	if *decode {
		return decodeIDs(tok, string(input), *special, stdout)
	}
	docs := []string{string(input)}
	if *sep != "" {
		docs = strings.Split(string(input), *sep)
	}
	var ids []int32
	for i, doc := range docs {
		if *sep != "" && doc == "" {
			continue // separators at the ends, or two in a row
		}
		got, err := encodeText(tok, doc, *bos, *parseSpecial)
		if err != nil {
			if len(docs) > 1 {
				return fmt.Errorf("document %d: %w", i+1, err)
			}
			return err
		}
		ids = append(ids, got...)
	}
	switch {
	case *out != "":
		return writeIDFile(*out, ids, tok.NVocab())
	case *pieces:
		return printPieces(stdout, tok, ids)
	}
	return printIDs(stdout, ids)
}

func loadTokenizer(path string) (*tokenizer.Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("-m %s: %w", path, err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("-m %s: %w", path, err)
	}
	return tok, nil
}

func encodeText(tok *tokenizer.Tokenizer, text string, bos, parseSpecial bool) ([]int32, error) {
	ids, err := tok.EncodeWith(text, tokenizer.EncodeOptions{ParseSpecial: parseSpecial})
	if err != nil {
		return nil, fmt.Errorf("stdin: %w", err)
	}
	if !bos {
		return ids, nil
	}
	if tok.BOS() < 0 {
		return nil, fmt.Errorf("--bos: the vocabulary has no BOS token")
	}
	if len(ids) > 0 && ids[0] == tok.BOS() {
		return ids, nil // the text starts with BOS itself (--parse-special): one is enough
	}
	return append([]int32{tok.BOS()}, ids...), nil
}

func printIDs(w io.Writer, ids []int32) error {
	bw := bufio.NewWriter(w)
	for i, id := range ids {
		if i > 0 {
			bw.WriteByte(' ')
		}
		bw.WriteString(strconv.Itoa(int(id)))
	}
	bw.WriteByte('\n')
	return bw.Flush()
}

// printPieces writes each token on a line: its id, a tab, and the text it
// adds (a control token's piece), quoted as Go quotes strings.
func printPieces(w io.Writer, tok *tokenizer.Tokenizer, ids []int32) error {
	bw := bufio.NewWriter(w)
	for _, id := range ids {
		text, err := tok.Text(id)
		if err != nil {
			return err
		}
		if typ, _ := tok.Type(id); typ == tokenizer.TypeControl {
			piece, _ := tok.Piece(id)
			text = []byte(piece)
		}
		fmt.Fprintf(bw, "%d\t%s\n", id, strconv.Quote(string(text)))
	}
	return bw.Flush()
}

// decodeIDs reads whitespace-separated ids and writes their text, byte for
// byte, with no newline added; with special, control tokens as their text.
func decodeIDs(tok *tokenizer.Tokenizer, input string, special bool, w io.Writer) error {
	fields := strings.Fields(input)
	ids := make([]int32, len(fields))
	for i, f := range fields {
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil || n < 0 || n >= int64(tok.NVocab()) {
			return fmt.Errorf("stdin: word %d, %q, is not a token id: want a whole number in [0, %d)", i+1, f, tok.NVocab())
		}
		ids[i] = int32(n)
	}
	decode := tok.Decode
	if special {
		decode = tok.DecodeSpecial
	}
	text, err := decode(ids)
	if err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	_, err = w.Write(text)
	return err
}

// writeIDFile writes ids in the flat format training scripts memory-map:
// uint16 when every id fits, else uint32, little-endian, no header.
func writeIDFile(path string, ids []int32, nVocab int) error {
	width := 2
	if nVocab > 1<<16 {
		width = 4
	}
	buf := make([]byte, width*len(ids))
	for i, id := range ids {
		if width == 2 {
			binary.LittleEndian.PutUint16(buf[2*i:], uint16(id))
		} else {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(id))
		}
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}
