//go:build ignore

// (The build line: this folder is also Go package bench, and go build refuses a C++
// file in a package that does not use cgo.)
// Measurement only (not part of modrun, built by hand by bench/cpu-quant-kld.sh). Runs a model through
// llama.cpp over the windows of a llama-perplexity --kl-divergence-base file
// (its tokens; BOS replacing each window's first token, as llama-perplexity
// does) and writes the float32 logits of the scored positions n_ctx/2 ..
// n_ctx-2 of every window: [n_chunk][n_ctx-1-n_ctx/2][n_vocab].
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
int main(int argc, char ** argv) {
    if (argc != 5) { fprintf(stderr, "usage: dump MODEL BASE.kld OUT.f32 f32|f16\n"); return 2; }
    FILE * in = fopen(argv[2], "rb");
    if (!in) { perror(argv[2]); return 1; }
    char magic[8]; uint32_t n_ctx; int n_vocab, n_chunk;
    if (fread(magic, 1, 8, in) != 8 || memcmp(magic, "_logits_", 8) ||
        fread(&n_ctx, 4, 1, in) != 1 || fread(&n_vocab, 4, 1, in) != 1 || fread(&n_chunk, 4, 1, in) != 1) {
        fprintf(stderr, "%s: not a logits file\n", argv[2]); return 1;
    }
    std::vector<llama_token> tokens(size_t(n_ctx) * n_chunk);
    if (fread(tokens.data(), 4, tokens.size(), in) != tokens.size()) { fprintf(stderr, "short tokens\n"); return 1; }
    fclose(in);
    llama_backend_init();
    auto mp = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    auto cp = llama_context_default_params();
    cp.n_ctx = n_ctx; cp.n_batch = n_ctx; cp.n_ubatch = n_ctx; cp.n_threads = 1; cp.n_threads_batch = 1;
    ggml_type kv = strcmp(argv[4], "f16") == 0 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.type_k = kv; cp.type_v = kv;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    const llama_vocab * vocab = llama_model_get_vocab(model);
    if (llama_vocab_n_tokens(vocab) != n_vocab) { fprintf(stderr, "vocab mismatch\n"); return 1; }
    FILE * out = fopen(argv[3], "wb");
    const int first = n_ctx / 2;
    llama_batch batch = llama_batch_init(n_ctx, 0, 1);
    for (int c = 0; c < n_chunk; c++) {
        llama_kv_cache_clear(ctx);
        batch.n_tokens = n_ctx;
        for (int k = 0; k < (int)n_ctx; k++) {
            batch.token[k] = k == 0 ? llama_vocab_bos(vocab) : tokens[size_t(c) * n_ctx + k];
            batch.pos[k] = k; batch.n_seq_id[k] = 1; batch.seq_id[k][0] = 0;
            batch.logits[k] = k >= first;
        }
        if (llama_decode(ctx, batch)) { fprintf(stderr, "decode failed\n"); return 1; }
        for (int k = first; k < (int)n_ctx - 1; k++) {
            fwrite(llama_get_logits_ith(ctx, k), 4, n_vocab, out);
        }
    }
    fclose(out);
    llama_free(ctx); llama_model_free(model);
    return 0;
}
