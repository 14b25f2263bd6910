/* run_tokens.c: token ids for capture and perplexity (see run_tokens.h). */
#include "run_tokens.h"

#include "cli.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS_FILE ((size_t)1 << 30)

/* Parses ids separated by whitespace (and commas); every field must be a decimal integer. */
static int parse_ids(const char *path, const char *text, size_t len, int vocab, run_tokens *t,
                     al_error *err) {
    size_t cap = 1024, n = 0;
    int32_t *ids = cli_malloc(cap * sizeof *ids, "token ids", err);
    if (!ids) return AL_E_NOMEM;
    const char *p = text, *end = text + len;
    while (p < end) {
        while (p < end && (isspace((unsigned char)*p) || *p == ',')) p++;
        if (p >= end) break;
        const char *s = p;
        while (p < end && !isspace((unsigned char)*p) && *p != ',') p++;
        long v = 0;
        int ok = p - s <= 10;
        for (const char *c = s; ok && c < p; c++) {
            if (*c < '0' || *c > '9')
                ok = 0;
            else
                v = v * 10 + (*c - '0');
        }
        if (!ok || v > INT32_MAX) {
            free(ids);
            return al_error_set(err, AL_E_FORMAT,
                                "%s: token %zu ('%.*s') is not a non-negative integer", path, n,
                                (int)(p - s > 32 ? 32 : p - s), s);
        }
        if (v >= vocab) {
            free(ids);
            return al_error_set(err, AL_E_RANGE,
                                "%s: token %zu is id %ld, outside the model's vocabulary [0, %d)",
                                path, n, v, vocab);
        }
        if (n == cap) {
            int32_t *nid = realloc(ids, 2 * cap * sizeof *ids);
            if (!nid) {
                free(ids);
                return al_error_set(err, AL_E_NOMEM, "%s: out of memory reading token ids", path);
            }
            ids = nid, cap *= 2;
        }
        ids[n++] = (int32_t)v;
    }
    if (n == 0) {
        free(ids);
        return al_error_set(err, AL_E_FORMAT, "%s: no token ids (the file is empty)", path);
    }
    t->ids = ids, t->n = n;
    return 0;
}

long run_tokens_warn_utf8(const char *cmd, const char *name, const char *text, size_t len) {
    size_t valid = al_utf8_valid_len(text, len);
    if (valid == len) return -1;
    fprintf(stderr,
            "attnlim %s: warning: %s is not valid UTF-8 at byte %zu (0x%02x); encoded byte-level "
            "as tiktoken's _encode_bytes does\n",
            cmd, name, valid, (unsigned char)text[valid]);
    return (long)valid;
}

/* --bos / --eos / --wrap of this run (run_opts_finish), applied by run_tokens_load: -1 = the
 * model's default, else 1 on / 0 off (one command per process). */
static int run_bos = -1, run_eos = -1, run_wrap = -1;

int run_tokens_load(const char *cmd, al_model *m, const char *tokens_path, const char *corpus,
                    run_tokens *t, al_error *err) {
    memset(t, 0, sizeof *t);
    t->invalid_utf8_at = -1;
    if (!!tokens_path == !!corpus)
        return al_error_set(err, AL_E_INVALID,
                            "give exactly one of --tokens FILE and --corpus NAME");
    double t0 = al_now();
    const al_model_info *info = al_model_get_info(m);
    char *text = NULL;
    size_t len = 0;
    int rc;
    if (tokens_path) {
        snprintf(t->source, sizeof t->source, "%s", tokens_path);
        if ((rc = al_read_file(tokens_path, MAX_TOKENS_FILE, &text, &len, err))) return rc;
        al_sha256_buf(text, len, t->sha256);
        rc = parse_ids(tokens_path, text, len, info->vocab_size, t, err);
        free(text);
        if (rc) return rc;
    } else {
        t->from_corpus = 1;
        snprintf(t->source, sizeof t->source, "%s", corpus);
        if ((rc = al_corpus_load(corpus, NULL, &text, &len, err))) return rc;
        al_sha256_buf(text, len, t->sha256);
        t->invalid_utf8_at = run_tokens_warn_utf8(cmd, corpus, text, len);
        al_tokenizer *tk = NULL;
        rc = al_model_tokenizer(m, &tk, err);
        if (!rc && al_framing_make(tk, run_bos, run_wrap, &t->fr, err))
            rc = al_error_prefix(err, "%s", info->path);
        if (!rc) al_tokenizer_set_bos_eos(tk, -1, run_eos);
        if (!rc) rc = al_framing_tokenize(tk, &t->fr, text, len, &t->ids, &t->n, err);
        t->framed = 1;
        al_tokenizer_free(tk);
        free(text);
        if (rc) return rc;
        if (t->n == 0) {
            run_tokens_free(t);
            return al_error_set(err, AL_E_FORMAT, "corpus %s: no tokens (empty text)", corpus);
        }
        for (size_t i = 0; i < t->n; i++)
            if (t->ids[i] < 0 || t->ids[i] >= info->vocab_size) {
                int bad = t->ids[i];
                run_tokens_free(t);
                return al_error_set(
                    err, AL_E_RANGE,
                    "corpus %s: token %zu has id %d, outside the model's vocabulary "
                    "[0, %d): tokenizer and model do not match",
                    corpus, i, bad, info->vocab_size);
            }
    }
    t->seconds = al_now() - t0;
    return 0;
}

void run_tokens_free(run_tokens *t) {
    if (!t) return;
    free(t->ids);
    free(t->win);
    t->ids = t->win = NULL;
    t->n = 0;
}

void run_tokens_framing_json(const run_tokens *t, cJSON *o) {
    char *txt = t->framed ? al_framing_json(&t->fr) : NULL;
    cJSON *j = txt ? cJSON_Parse(txt) : NULL;
    if (j) cJSON_AddItemToObject(o, "framing", j);
    al_free(txt);
}

long run_tokens_all_length(const run_tokens *t, long K) {
    long extra = t->framed ? 2 - al_framing_body(&t->fr, 2) : 0;
    return (long)(t->n / (size_t)K) + extra;
}

int run_tokens_window(run_tokens *t, const al_model_info *info, long k, long L, const int32_t **out,
                      al_error *err) {
    if (t->framed && al_framing_body(&t->fr, L) != L && L >= 1 && L <= info->n_ctx && k >= 0) {
        free(t->win), t->win = NULL; /* an encoder's window: [CLS] + L - 2 tokens + [SEP] */
        int rc = al_framing_window_alloc(&t->fr, t->ids, t->n, k, L, t->source, &t->win, err);
        *out = t->win;
        return rc;
    }
    if (L < 1)
        return al_error_set(err, AL_E_INVALID, "--length %ld: a window needs at least 1 token", L);
    if (L > info->n_ctx)
        return al_error_set(err, AL_E_INVALID, "--length %ld exceeds the context of %s (%d tokens)",
                            L, info->path, info->n_ctx);
    if (k < 0)
        return al_error_set(err, AL_E_INVALID, "--window %ld: windows are numbered from 0", k);
    size_t avail = t->n / (size_t)L; /* whole windows in the tokens */
    if (avail == 0)
        return al_error_set(err, AL_E_RANGE,
                            "%s has %zu tokens, fewer than one window of length %ld", t->source,
                            t->n, L);
    if ((size_t)k >= avail)
        return al_error_set(
            err, AL_E_RANGE,
            "window %ld of length %ld needs tokens [%ld, %ld), but %s has %zu tokens "
            "(windows 0..%ld of that length)",
            k, L, k * L, (k + 1) * L, t->source, t->n, (long)avail - 1);
    *out = t->ids + (size_t)k * (size_t)L;
    return 0;
}

/* ---- the run options --------------------------------------------------------------------- */

const cli_opt RUN_OPTS[] = {
    {RUN_O_MODEL, "--model", "PATH", "a checkpoint or a known name (gpt2, smollm2, minilm)"},
    {RUN_O_TOKENS, "--tokens", "FILE", "token ids separated by whitespace"},
    {RUN_O_CORPUS, "--corpus", "NAME",
     "war-and-peace (METHOD section 1) or a text file, tokenized with\n"
     "the model's tokenizer (--length required)"},
    {RUN_O_TEXT, "--text", "PROMPT", "the prompt itself, tokenized likewise"},
    {RUN_O_LENGTH, "--length", "L", "tokens per window (default with --tokens or --text: all)"},
    CLI_MORE(CLI_FRAMING_OPTS),
    {RUN_O_EOS, "--eos", NULL, "(also --eos on|off) EOS last in the text (tokenizer.json models)"},
    {RUN_O_NO_EOS, "--no-eos", NULL, "no EOS (--eos off; the default: as the files say)"},
    {RUN_O_THREADS, "--threads", "N", "compute threads (default: all cores, or OMP_NUM_THREADS)"},
    {RUN_O_ATTENTION, "--attention", "R",
     "the attention inside the forward, in every layer (so later layers\n"
     "see the change): dense (default), topk:K, topk-frac:F (K = ceil(F L)),\n"
     "topk-sqrt:C (K = ceil(C sqrt n)), topk-log:C (K = ceil(C ln n)); each\n"
     "query row of n visible keys keeps its min(n, K) largest logits (ties\n"
     "toward the lower index), the others get weight 0"},
    {RUN_O_NORMALIZER, "--attention-normalizer", "M",
     "over the kept logits: softmax (default), sparsemax, entmax15,\n"
     "entmax:A, ssmax[:S] (scale s ln(kept))"},
    {RUN_O_NORMALIZER_MOVED, "--normalizer", "M",
     "refused here: it is reproduce's and diagnose's re-normalisation of\n"
     "captured logits (use --attention-normalizer)"},
    {RUN_O_ATTN_LAYERS, "--attention-layers", "SET",
     "the layers modified (0,3,5-7 or all, the default)"},
    {RUN_O_ATTN_HEADS, "--attention-heads", "SET",
     "the query heads modified (0,3,5-7 or all, the default)"},
    CLI_OPT_END,
};

int run_opts_take(cli_parser *p, int id, const char *v, run_opts *o) {
    al_error err = {0};
    al_attn_variant var = {0};
    al_norm nm;
    long *num = id == RUN_O_LENGTH ? &o->length : id == RUN_O_THREADS ? &o->threads : NULL;
    const char **str = id == RUN_O_MODEL         ? &o->model
                       : id == RUN_O_TOKENS      ? &o->tokens
                       : id == RUN_O_CORPUS      ? &o->corpus
                       : id == RUN_O_ATTENTION   ? &o->attention
                       : id == RUN_O_NORMALIZER  ? &o->normalizer
                       : id == RUN_O_ATTN_LAYERS ? &o->attn_layers
                       : id == RUN_O_ATTN_HEADS  ? &o->attn_heads
                                                 : NULL;
    int sw = cli_framing_take(p, id, &o->bos, &o->wrap);
    if (!sw) sw = cli_switch_take(p, RUN_O_EOS, RUN_O_NO_EOS, id, &o->eos);
    if (sw) return sw;
    if (id < RUN_O_MODEL || id > RUN_O_LAST) return 0;
    if (id == RUN_O_JSON) o->json = 1;
    if (id == RUN_O_ALLOW_NONFINITE) o->allow_nonfinite = 1;
    if (id == RUN_O_TEXT && !(o->corpus = cli_text_corpus(v)))
        return cli_parse_error(p, "--text: too many prompts");
    if (str) *str = v;
    if (id == RUN_O_NORMALIZER_MOVED) return cli_parse_error(p, "%s", CLI_NORMALIZER_MOVED);
    if (id == RUN_O_ATTENTION && al_attn_rule_parse(v, &var, &err))
        return cli_parse_error(p, "%s", err.msg);
    if (id == RUN_O_NORMALIZER && al_attn_norm_parse(v, &nm, &err))
        return cli_parse_error(p, "%s", err.msg);
    if (num) {
        long lo = num == &o->length ? -(1L << 40) : 1, hi = num == &o->length ? 1L << 40 : 1024;
        if (cli_parse_int(v, p->opt, lo, hi, num, &err)) return cli_parse_error(p, "%s", err.msg);
        if (num == &o->length) o->have_length = 1;
    }
    return 1;
}

int run_opts_finish(const char *cmd, run_opts *o, long min_length, const char *min_what) {
    if (!o->model) return cli_usage_error(cmd, "--model PATH is required");
    if (!!o->tokens == !!o->corpus)
        return cli_usage_error(cmd, "give exactly one of --tokens FILE, --corpus NAME and --text "
                                    "PROMPT");
    if (!o->have_length && !o->tokens && !cli_is_prompt(o->corpus))
        return cli_usage_error(cmd, "--length L is required with --corpus (with --tokens or "
                                    "--text it defaults to the number of tokens)");
    if (o->have_length && o->length < min_length)
        return cli_usage_error(cmd, "--length %ld: %s", o->length, min_what);
    if (o->threads) al_set_threads((int)o->threads);
    run_bos = o->bos ? o->bos == 1 : -1;
    run_eos = o->eos ? o->eos == 1 : -1;
    run_wrap = o->wrap ? o->wrap == 1 : -1;
    return 0;
}

/* ---- the attention variant --------------------------------------------------------------- */

int run_attn_apply(al_model *m, const run_opts *o, al_error *err) {
    if (!o->attention && !o->normalizer && !o->attn_layers && !o->attn_heads) return 0;
    const al_model_info *info = al_model_get_info(m);
    al_attn_variant v = {.rule = AL_ATTN_DENSE, .norm = al_norm_default(AL_NORM_SOFTMAX)};
    int rc = o->attention ? al_attn_rule_parse(o->attention, &v, err) : 0;
    if (!rc && o->normalizer) rc = al_attn_norm_parse(o->normalizer, &v.norm, err);
    if (rc) return rc;
    uint8_t *layers = cli_malloc((size_t)info->n_layer, "layer mask", err);
    uint8_t *heads = cli_malloc((size_t)info->n_head, "head mask", err);
    if (!layers || !heads) rc = AL_E_NOMEM;
    if (!rc) rc = cli_parse_sel(o->attn_layers, "--attention-layers", info->n_layer, layers, err);
    if (!rc) rc = cli_parse_sel(o->attn_heads, "--attention-heads", info->n_head, heads, err);
    v.layers = o->attn_layers ? layers : NULL;
    v.heads = o->attn_heads ? heads : NULL;
    if (!rc) rc = al_model_set_attention(m, &v, err);
    free(layers);
    free(heads);
    return rc;
}
