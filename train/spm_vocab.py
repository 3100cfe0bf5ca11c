#!/usr/bin/python3
"""Train a SentencePiece BPE vocabulary on TinyStories and write it as a
vocab-only GGUF that `modrun tokenize` reads, so Go and Python agree by
construction.

The settings are Llama's (BPE, byte fallback, digits split, dummy prefix,
identity normalization, spaces kept; <unk>=0, <s>=1, </s>=2, no pad), and the
GGUF has the form of llama.cpp's vocab files (ggml-vocab-llama-spm.gguf):
pieces as SentencePiece stores them (U+2581 for a space), scores, token types.
Training is deterministic: one thread, a fixed seed, and an input bound
larger than the text, so no sentences are sampled.

  /usr/bin/python3 train/spm_vocab.py --vocab-size 4096 --out runs/spm4096
      # writes runs/spm4096/spm.model, spm.vocab and vocab.gguf

Needs Debian's python3-sentencepiece (0.1.97 here).
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import sentencepiece as spm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_io import write_vocab_gguf  # noqa: E402

STORY_SEPARATOR = "<|endoftext|>"

# llama.cpp's token types (gguf-py constants.py TokenType).
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE = 1, 2, 3, 4, 5, 6


def settings(vocab_size, character_coverage=0.9995, input_sentence_size=1_000_000, seed=1):
    """The trainer options. Every one that changes the result is here, so a
    hash of this dict (with the inputs) names a vocabulary."""
    return dict(
        model_type="bpe", vocab_size=int(vocab_size),
        byte_fallback=True, split_digits=True, add_dummy_prefix=True,
        remove_extra_whitespaces=False, normalization_rule_name="identity",
        allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        # Characters below the coverage are left to byte fallback; 1.0 would
        # spend a small vocabulary on rare letters.
        character_coverage=float(character_coverage),
        # Bounds memory; above the line count of our text, so nothing is sampled.
        input_sentence_size=int(input_sentence_size), shuffle_input_sentence=True,
        num_threads=1, seed=int(seed),
    )


def training_lines(paths, max_bytes=None):
    """Non-empty lines of the training files without the story separators
    (SentencePiece trains on lines; a story's newlines become byte tokens).
    With max_bytes, stop after about that much text."""
    total = 0
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                line = line.rstrip("\n")
                if not line.strip() or line.strip() == STORY_SEPARATOR:
                    continue
                if max_bytes is not None and total >= max_bytes:
                    return
                total += len(line.encode("utf-8")) + 1
                yield line


def train_model(lines, model_prefix, opts):
    """Train SentencePiece on an iterable of lines; writes PREFIX.model/.vocab."""
    opts = dict(opts)
    spm.set_random_generator_seed(opts.pop("seed"))
    try:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=model_prefix,
                                       minloglevel=2, **opts)
    except RuntimeError as e:  # e.g. a vocab_size too small for the required characters
        raise ValueError(f"sentencepiece training failed: {e}") from e
    return model_prefix + ".model"


def vocab_kv(sp, name):
    """The tokenizer metadata of a llama.cpp vocab GGUF for a SentencePiece model."""
    n = sp.get_piece_size()
    tokens, scores, types = [], np.zeros(n, dtype="<f4"), np.zeros(n, dtype="<i4")
    for i in range(n):
        tokens.append(sp.id_to_piece(i))
        scores[i] = sp.get_score(i)
        if sp.is_unknown(i):
            types[i] = TT_UNKNOWN
        elif sp.is_control(i):
            types[i] = TT_CONTROL
        elif sp.is_byte(i):
            types[i] = TT_BYTE
        elif sp.is_unused(i):
            types[i] = TT_UNUSED
        else:
            types[i] = TT_NORMAL
    return {
        "general.architecture": "llama",
        "general.name": name,
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": sp.bos_id(),
        "tokenizer.ggml.eos_token_id": sp.eos_id(),
        "tokenizer.ggml.unknown_token_id": sp.unk_id(),
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
    }


def write_gguf(model_path, gguf_path, name):
    sp = spm.SentencePieceProcessor(model_file=model_path)
    write_vocab_gguf(gguf_path, vocab_kv(sp, name))
    return gguf_path


def build(paths, out_dir, opts, max_bytes=None):
    """Train on the files and write OUT/spm.model, spm.vocab, vocab.gguf and
    settings.json. Returns the GGUF's path."""
    os.makedirs(out_dir, exist_ok=True)
    model = train_model(training_lines(paths, max_bytes), os.path.join(out_dir, "spm"), opts)
    gguf = write_gguf(model, os.path.join(out_dir, "vocab.gguf"), f"tinystories-spm-bpe-{opts['vocab_size']}")
    with open(os.path.join(out_dir, "settings.json"), "w") as fh:
        json.dump({"sentencepiece": spm.__version__, "train_files": [os.path.abspath(p) for p in paths],
                   "max_bytes": max_bytes, "settings": opts}, fh, indent=2)
        fh.write("\n")
    return gguf


def cache_key(paths, opts, max_bytes=None):
    """A hash of the settings, the sentencepiece version and the input bytes."""
    h = hashlib.sha256(json.dumps([spm.__version__, opts, max_bytes], sort_keys=True).encode())
    for p in paths:
        with open(p, "rb") as fh:
            h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()[:16]


def cached(paths, cache_dir, opts, max_bytes=None):
    """build() into CACHE/spm-bpe-N-KEY unless it is there already; returns
    the GGUF's path. Built in a temporary folder and renamed, so an
    interrupted run leaves nothing half-written behind."""
    d = os.path.join(cache_dir, f"spm-bpe-{opts['vocab_size']}-{cache_key(paths, opts, max_bytes)}")
    gguf = os.path.join(d, "vocab.gguf")
    if os.path.exists(gguf):
        return gguf
    os.makedirs(cache_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".spm-", dir=cache_dir)
    try:
        build(paths, tmp, opts, max_bytes)
        os.replace(tmp, d)
    except OSError:
        if not os.path.exists(gguf):  # not a lost race with another run
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"trained SentencePiece BPE vocab ({opts['vocab_size']} tokens) -> {gguf}", flush=True)
    return gguf


def main(argv=None):
    import train  # the default file list lives with the trainer
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab-size", type=int, required=True)
    p.add_argument("--out", required=True, help="folder for spm.model, spm.vocab, vocab.gguf, settings.json")
    p.add_argument("--train-files", nargs="+", default=train.TRAIN_FILES)
    p.add_argument("--character-coverage", type=float, default=0.9995)
    p.add_argument("--max-bytes", type=int, help="train on about this many bytes of text only")
    a = p.parse_args(argv)
    if os.path.abspath(train.VAL_FILE) in [os.path.abspath(f) for f in a.train_files]:
        p.error(f"{train.VAL_FILE} is the validation file; never train on it")
    gguf = build(a.train_files, a.out, settings(a.vocab_size, a.character_coverage), a.max_bytes)
    print(f"wrote {gguf}")


if __name__ == "__main__":
    main()
