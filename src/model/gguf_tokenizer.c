/* gguf_tokenizer.c: the tokenizer of a GGUF file from its metadata, onto the tokenizer.json
 * pipeline and BPE engine of src/text (one engine for both formats):
 *   tokenizer.ggml.model        "llama" (SentencePiece-style BPE) or "gpt2" (byte-level BPE)
 *   tokenizer.ggml.pre          gpt2: the pre-tokenizer name (al__hftok_pre_names); absent =
 *                               "default"
 *   tokenizer.ggml.tokens       [V] strings (V = the embedding rows when the model says)
 *   tokenizer.ggml.scores       [V] floats (llama: the merge order), optional for gpt2
 *   tokenizer.ggml.token_type   [V] ints (1 normal, 2 unknown, 3 control, 4 user-defined,
 *                               5 unused, 6 byte), optional
 *   tokenizer.ggml.merges       gpt2: "left right" strings, rank = order
 *   tokenizer.ggml.{bos,eos,unknown}_token_id, add_bos_token, add_eos_token,
 *   add_space_prefix (llama; default true)
 * Every array length is checked against the tokens'; faults name the file and the key. */
#include "gguf.h"
#include "model.h"
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

/* An optional integer key into *v (left as it is when absent). */
static int opt_int(const al__gguf *g, const char *key, int64_t lo, int64_t hi, int32_t *v,
                   al_error *err) {
    int64_t x;
    if (!al__gguf_find(g, key)) return 0;
    int rc = al__gguf_get_int(g, key, lo, hi, &x, err);
    if (!rc) *v = (int32_t)x;
    return rc;
}

/* The scalar fields of the spec (strings into model[64], pre[64]). */
static int read_scalars(const al__gguf *g, al__tok_spec *s, char *model, char *pre, int64_t n_tok,
                        al_error *err) {
    int rc = al__gguf_get_str(g, "tokenizer.ggml.model", model, 64, err);
    if (!rc && al__gguf_find(g, "tokenizer.ggml.pre"))
        rc = al__gguf_get_str(g, "tokenizer.ggml.pre", pre, 64, err);
    s->model = model, s->pre = pre;
    s->unk_id = s->bos_id = s->eos_id = -1, s->add_bos = s->add_eos = -1;
    s->add_space_prefix = 1;
    const char *ids[3] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id"};
    int32_t *dst[3] = {&s->bos_id, &s->eos_id, &s->unk_id};
    for (int i = 0; i < 3 && !rc; i++) rc = opt_int(g, ids[i], 0, n_tok - 1, dst[i], err);
    const char *flags[3] = {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
                            "tokenizer.ggml.add_space_prefix"};
    int32_t *fl[3] = {&s->add_bos, &s->add_eos, &s->add_space_prefix};
    for (int i = 0; i < 3 && !rc; i++) rc = opt_int(g, flags[i], 0, 1, fl[i], err);
    return rc;
}

/* An array the tokens need one entry of per token: its length checked. */
static int check_len(const al__gguf *g, const char *key, int64_t n, int64_t n_tok, al_error *err) {
    if (n == n_tok) return 0;
    return al__err(err, AL_E_FORMAT, "%s: %s has %lld entries for %lld tokens", g->name, key,
                   (long long)n, (long long)n_tok);
}

int al__gguf_tokenizer(const al__gguf *g, int vocab, al_tokenizer **out, al_error *err) {
    *out = NULL;
    char model[64] = "", pre[64] = "default";
    char **tokens = NULL, **merges = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    int64_t n_tok = 0, n_merge = 0, n_sc = 0, n_ty = 0;
    al__tok_spec s = {.name = g->name};
    int rc = al__gguf_get_str_array(g, "tokenizer.ggml.tokens", &tokens, &n_tok, err);
    if (!rc && (n_tok <= 0 || n_tok > (1 << 24) || (vocab > 0 && n_tok != vocab)))
        rc = al__err(err, AL_E_FORMAT, "%s: %lld tokenizer tokens for a vocabulary of %d", g->name,
                     (long long)n_tok, vocab > 0 ? vocab : (1 << 24));
    if (!rc) rc = read_scalars(g, &s, model, pre, n_tok, err);
    if (!rc && al__gguf_find(g, "tokenizer.ggml.scores") &&
        !(rc = al__gguf_get_f32_array(g, "tokenizer.ggml.scores", &scores, &n_sc, err)))
        rc = check_len(g, "tokenizer.ggml.scores", n_sc, n_tok, err);
    if (!rc && al__gguf_find(g, "tokenizer.ggml.token_type") &&
        !(rc = al__gguf_get_i32_array(g, "tokenizer.ggml.token_type", &types, &n_ty, err)))
        rc = check_len(g, "tokenizer.ggml.token_type", n_ty, n_tok, err);
    if (!rc && strcmp(model, "llama") != 0 && al__gguf_find(g, "tokenizer.ggml.merges"))
        rc = al__gguf_get_str_array(g, "tokenizer.ggml.merges", &merges, &n_merge, err);
    if (!rc && n_merge > (1 << 24))
        rc = al__err(err, AL_E_FORMAT, "%s: %lld merges", g->name, (long long)n_merge);
    al__hftok *t = NULL;
    if (!rc) {
        s.tokens = (const char *const *)tokens, s.n_tokens = (int)n_tok;
        s.merges = (const char *const *)merges, s.n_merges = (int)n_merge;
        s.scores = scores, s.types = types;
        rc = al__hftok_from_spec(&s, &t, err);
    }
    if (!rc) rc = al__tokenizer_from_hf(t, out, err);
    free(tokens), free(merges), free(scores), free(types);
    if (rc && err && !strstr(err->msg, g->name))
        al__err_prefix(err, (al_code)rc, "%s: tokenizer", g->name);
    return rc;
}
