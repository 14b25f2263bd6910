/* tokenizer.c: the public al_tokenizer (one of the engines: byte-level BPE in src/bpe.c,
 * WordPiece in src/wordpiece.c) and the GPT-2 vocabulary files.
 *
 * Files (untrusted): encoder.json (or HF vocab.json) is a JSON object token -> id whose ids
 * must be exactly 0..V-1, each once; vocab.bpe (or HF merges.txt) is an optional
 * "#version" line then one "left right" merge per line, rank = order. Every fault is
 * reported with the file and, for vocab.bpe and JSON syntax, the line. */
#include "tokenizer.h"
#include "textsafe.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_VOCAB_FILE (256u << 20) /* encoder.json / vocab.bpe size cap */
#define MAX_VOCAB      (1 << 24)

struct al_tokenizer {
    al__bpe *bpe; /* exactly one of the two engines */
    al__wordpiece *wp;
    al__hftok *hf; /* or the tokenizer.json pipeline over a BPE engine */
    int vocab_size;
    int32_t bos_id;       /* a non-HF engine's BOS (al__tokenizer_set_bos; -1 none) */
    int bos_default;      /* whether the model's files add it */
    const char *bos_from; /* where that default comes from */
};

int al__tokenizer_from_hf(al__hftok *t, al_tokenizer **out, al_error *err) {
    *out = NULL;
    al_tokenizer *tk = al__calloc(1, sizeof *tk, "tokenizer", err);
    if (!tk) {
        al__hftok_free(t);
        return AL_E_NOMEM;
    }
    tk->hf = t;
    tk->bos_id = -1;
    tk->vocab_size = al__hftok_vocab_size(t);
    *out = tk;
    return 0;
}

int al__hf_tokenizer_open(const char *dir, al_tokenizer **out, al_error *err) {
    *out = NULL;
    al__hftok *t = NULL;
    int rc = al__hftok_open_dir(dir, &t, err);
    return rc ? rc : al__tokenizer_from_hf(t, out, err);
}

void al_tokenizer_set_bos_eos(al_tokenizer *tk, int add_bos, int add_eos) {
    if (tk && tk->hf) al__hftok_set_bos_eos(tk->hf, add_bos, add_eos);
}

void al__tokenizer_set_bos(al_tokenizer *tk, int32_t id, int dflt, const char *from) {
    if (!tk || tk->hf) return;
    tk->bos_id = id >= 0 && id < tk->vocab_size ? id : -1;
    tk->bos_default = dflt && tk->bos_id >= 0;
    tk->bos_from = from;
}

/* ---- framing: how a corpus becomes windows (tokenizer.h) ----------------------------------- */

int al_framing_make(al_tokenizer *tk, int bos, int wrap, al_framing *f, al_error *err) {
    memset(f, 0, sizeof *f);
    f->bos_id = f->cls = f->sep = -1;
    if (!tk) return al__err(err, AL_E_INVALID, "al_framing_make: NULL tokenizer");
    if (tk->wp) {
        f->encoder = 1;
        al__wordpiece_cls_sep(tk->wp, &f->cls, &f->sep);
        f->wrap = wrap != 0;
        f->bos_from = "an encoder: no BOS; windows [CLS] ... [SEP] (--wrap, the default)";
        if (bos == 1)
            return al__err(err, AL_E_INVALID,
                           "--bos: an encoder (WordPiece) has no BOS token; its windows are "
                           "[CLS] ... [SEP] (--wrap, the default) or bare (--no-wrap)");
        return 0;
    }
    if (wrap == 1)
        return al__err(err, AL_E_INVALID,
                       "--wrap: [CLS] ... [SEP] windows are for encoders (WordPiece); this model "
                       "is a decoder (see --bos)");
    if (tk->hf)
        al__hftok_bos(tk->hf, &f->bos_id, &f->bos_default, &f->bos_from);
    else
        f->bos_id = tk->bos_id, f->bos_default = tk->bos_default,
        f->bos_from = tk->bos_from ? tk->bos_from : "the tokenizer names no BOS token";
    if (bos == 1 && f->bos_id < 0)
        return al__err(err, AL_E_INVALID, "--bos: the model's tokenizer has no BOS token (%s)",
                       f->bos_from);
    f->bos = bos < 0 ? f->bos_default : bos;
    if (tk->hf) al__hftok_set_bos_eos(tk->hf, f->bos, -1);
    char *t = NULL;
    size_t tl;
    al_error e = {0};
    if (f->bos_id >= 0 && !al_detokenize(tk, &f->bos_id, 1, &t, &tl, &e))
        snprintf(f->bos_token, sizeof f->bos_token, "%s", t);
    free(t);
    return 0;
}

int al_framing_tokenize(const al_tokenizer *tk, const al_framing *f, const char *text, size_t len,
                        int32_t **ids, size_t *n, al_error *err) {
    int rc = al_tokenize(tk, text, len, 0, ids, n, err);
    if (rc) return rc;
    int32_t *v = *ids;
    if (f->encoder) { /* the body: without the [CLS] ... [SEP] WordPiece puts around a text */
        size_t a = *n > 0 && v[0] == f->cls, b = *n > a && v[*n - 1] == f->sep;
        memmove(v, v + a, (*n - a - b) * sizeof *v);
        *n -= a + b;
    } else if (f->bos && !tk->hf) { /* the HF pipeline adds its own */
        int32_t *w = realloc(v, (*n + 1) * sizeof *v);
        if (!w) {
            free(v), *ids = NULL, *n = 0;
            return al__err(err, AL_E_NOMEM, "out of memory (token ids)");
        }
        memmove(w + 1, w, *n * sizeof *w);
        w[0] = f->bos_id;
        *ids = w, (*n)++;
    }
    return 0;
}

long al_framing_body(const al_framing *f, long L) {
    return f->encoder && f->wrap ? L - 2 : L;
}

void al_framing_window(const al_framing *f, const int32_t *body, long k, long L, int32_t *dst) {
    long B = al_framing_body(f, L);
    if (B == L) {
        memcpy(dst, body + (size_t)k * L, sizeof *dst * (size_t)L);
        return;
    }
    dst[0] = f->cls;
    if (B > 0) memcpy(dst + 1, body + (size_t)k * B, sizeof *dst * (size_t)B);
    dst[L - 1] = f->sep;
}

int al_framing_window_alloc(const al_framing *f, const int32_t *ids, size_t n, long k, long L,
                            const char *source, int32_t **dst, al_error *err) {
    *dst = NULL;
    long B = al_framing_body(f, L);
    if (B < 1)
        return al__err(err, AL_E_INVALID,
                       "L = %ld: a window [CLS] ... [SEP] needs L >= 3 (L counts the two; "
                       "--no-wrap for bare windows)",
                       L);
    size_t avail = n / (size_t)B;
    if ((size_t)k >= avail)
        return al__err(err, AL_E_RANGE,
                       "%s: %zu tokens, but window %ld of L = %ld needs %zu%s (windows 0..%ld "
                       "there)",
                       source, n, k, L, (size_t)(k + 1) * B,
                       B < L ? " (L - 2 corpus tokens per window, between [CLS] and [SEP])" : "",
                       (long)avail - 1);
    if (!(*dst = al__malloc(sizeof **dst * (size_t)L, "window tokens", err))) return AL_E_NOMEM;
    al_framing_window(f, ids, k, L, *dst);
    return 0;
}

void al__framing_json(const al_framing *f, cJSON *parent) {
    cJSON *o = cJSON_AddObjectToObject(parent, "framing");
    if (!o) return;
    cJSON *b = cJSON_AddObjectToObject(o, "bos");
    cJSON_AddBoolToObject(b, "used", f->bos);
    cJSON_AddBoolToObject(b, "default", f->bos_default);
    cJSON_AddStringToObject(b, "default_from", f->bos_from ? f->bos_from : "");
    if (f->bos_id >= 0) {
        cJSON_AddNumberToObject(b, "id", f->bos_id);
        cJSON_AddStringToObject(b, "token", f->bos_token); /* al__json_print repairs it */
    } else {
        cJSON_AddNullToObject(b, "id");
    }
    cJSON_AddBoolToObject(o, "encoder", f->encoder);
    cJSON_AddBoolToObject(o, "wrap", f->encoder && f->wrap);
    cJSON_AddStringToObject(
        o, "L_counts",
        f->encoder && f->wrap
            ? "every window is [CLS] + L - 2 corpus tokens + [SEP]: L counts the two special "
              "tokens (the forward's T = L; every row sees n = L keys)"
        : f->bos ? "window k is ids [kL, (k+1)L) of the text with BOS first: window 0 starts "
                   "with BOS, and L counts it"
                 : "window k is ids [kL, (k+1)L) of the tokenized text (no special tokens)");
}

int al__tokenizer_from_bpe(al__bpe *b, al_tokenizer **out, al_error *err) {
    *out = NULL;
    if (!b) return al__err(err, AL_E_INVALID, "al__tokenizer_from_bpe: NULL engine");
    al_tokenizer *tk = al__calloc(1, sizeof *tk, "tokenizer", err);
    if (!tk) {
        al__bpe_free(b);
        return AL_E_NOMEM;
    }
    tk->bpe = b;
    tk->bos_id = -1;
    tk->vocab_size = al__bpe_vocab_size(b);
    *out = tk;
    return 0;
}

int al__tokenizer_from_wordpiece(al__wordpiece *w, al_tokenizer **out, al_error *err) {
    *out = NULL;
    if (!w) return al__err(err, AL_E_INVALID, "al__tokenizer_from_wordpiece: NULL engine");
    al_tokenizer *tk = al__calloc(1, sizeof *tk, "tokenizer", err);
    if (!tk) {
        al__wordpiece_free(w);
        return AL_E_NOMEM;
    }
    tk->wp = w;
    tk->bos_id = -1;
    tk->vocab_size = al__wordpiece_vocab_size(w);
    *out = tk;
    return 0;
}

void al_tokenizer_free(al_tokenizer *tk) {
    if (!tk) return;
    al__bpe_free(tk->bpe);
    al__hftok_free(tk->hf);
    if (tk->wp) al__wordpiece_free(tk->wp);
    free(tk);
}

int al_tokenizer_vocab_size(const al_tokenizer *tk) {
    return tk ? tk->vocab_size : 0;
}

int al_tokenize(const al_tokenizer *tk, const char *text, size_t len, int allow_special,
                int32_t **ids, size_t *n, al_error *err) {
    if (!ids || !n) return al__err(err, AL_E_INVALID, "al_tokenize: NULL output");
    *ids = NULL;
    *n = 0;
    if (!tk) return al__err(err, AL_E_INVALID, "al_tokenize: NULL tokenizer");
    if (tk->hf) return al__hftok_encode(tk->hf, text, len, allow_special, ids, n, err);
    if (tk->bpe) return al__bpe_encode(tk->bpe, text, len, allow_special, ids, n, err);
    return al__wordpiece_encode(tk->wp, text, len, ids, n, err);
}

int al_detokenize(const al_tokenizer *tk, const int32_t *ids, size_t n, char **text, size_t *len,
                  al_error *err) {
    if (!text) return al__err(err, AL_E_INVALID, "al_detokenize: NULL output");
    *text = NULL;
    if (len) *len = 0;
    if (!tk) return al__err(err, AL_E_INVALID, "al_detokenize: NULL tokenizer");
    if (tk->hf) return al__hftok_decode(tk->hf, ids, n, text, len, err);
    if (tk->bpe) return al__bpe_decode(tk->bpe, ids, n, text, len, err);
    size_t dummy;
    return al__wordpiece_decode(tk->wp, ids, n, text, len ? len : &dummy, err);
}

size_t al_utf8_valid_len(const char *text, size_t len) {
    return text ? al__utf8_valid_len((const unsigned char *)text, len) : 0;
}

/* ---- GPT-2 vocabulary files ---------------------------------------------------------------- */

static int line_of(const char *buf, const char *at) {
    int line = 1;
    for (const char *p = buf; p < at; p++) line += *p == '\n';
    return line;
}

/* Line of the k-th member (0-based) of the top-level JSON object, by a scan of the raw text
 * (cJSON keeps no positions). */
static int member_line(const char *buf, size_t len, int k) {
    int depth = 0, line = 1, idx = -1, expect_key = 0;
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (c == '\n') line++;
        if (c == '"') {
            if (depth == 1 && expect_key) {
                if (++idx == k) return line;
                expect_key = 0;
            }
            for (i++; i < len && buf[i] != '"'; i++) {
                if (buf[i] == '\\')
                    i++;
                else if (buf[i] == '\n')
                    line++;
            }
            continue;
        }
        if (c == '{' || c == '[') {
            depth++;
            if (depth == 1 && c == '{') expect_key = 1;
        } else if (c == '}' || c == ']')
            depth--;
        else if (c == ',' && depth == 1)
            expect_key = 1;
    }
    return line;
}

/* encoder.json -> tokens[V] (strings owned by the cJSON tree *root). */
static int read_encoder(const char *path, cJSON **root, const char ***tokens_out, int *n_out,
                        al_error *err) {
    char *buf = NULL;
    size_t len = 0;
    *root = NULL;
    *tokens_out = NULL;
    int rc = al__read_file(path, MAX_VOCAB_FILE, &buf, &len, err);
    if (rc) return rc;
    if (len == 0) {
        free(buf);
        return al__err(err, AL_E_FORMAT, "%s: empty file (expected a JSON object token -> id)",
                       path);
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    const char *at = end && end >= buf && end <= buf + len ? end : buf;
    if (j) /* only white space may follow the object */
        while (at < buf + len && (*at == ' ' || *at == '\n' || *at == '\r' || *at == '\t')) at++;
    if (!j || at < buf + len) {
        rc = al__err(err, AL_E_FORMAT, "%s line %d: malformed JSON (%s near byte %zu)", path,
                     line_of(buf, at), j ? "text after the object" : "syntax error",
                     (size_t)(at - buf));
        cJSON_Delete(j);
        free(buf);
        return rc;
    }
    if (!cJSON_IsObject(j)) {
        free(buf);
        cJSON_Delete(j);
        return al__err(err, AL_E_FORMAT, "%s: expected a JSON object token -> id", path);
    }
    if (al__json_check_unique(j, path, err)) {
        free(buf);
        cJSON_Delete(j);
        return AL_E_FORMAT;
    }
    int n = cJSON_GetArraySize(j);
    if (n <= 0 || n > MAX_VOCAB) {
        free(buf);
        cJSON_Delete(j);
        return al__err(err, AL_E_FORMAT, "%s: %d entries (expected 1..%d)", path, n, MAX_VOCAB);
    }
    const char **tokens = al__calloc((size_t)n, sizeof *tokens, "vocabulary", err);
    if (!tokens) {
        free(buf);
        cJSON_Delete(j);
        return AL_E_NOMEM;
    }
    int k = 0;
    for (cJSON *e = j->child; e; e = e->next, k++) {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        const char *key = e->string ? e->string : "";
        if (!cJSON_IsNumber(e) || !(v >= 0 && v < n) || v != (double)(int)v) {
            rc = al__err(err, AL_E_FORMAT,
                         "%s line %d: token '%.100s' has an id %s (expected an integer in 0..%d: "
                         "the ids of %d tokens must be exactly 0..%d)",
                         path, member_line(buf, len, k), key,
                         cJSON_IsNumber(e) ? "out of range" : "that is not a number", n - 1, n,
                         n - 1);
            break;
        }
        int id = (int)v;
        if (tokens[id]) {
            rc = al__err(err, AL_E_FORMAT,
                         "%s line %d: id %d is given to both '%.100s' and '%.100s'", path,
                         member_line(buf, len, k), id, tokens[id], key);
            break;
        }
        if (!*key) {
            rc = al__err(err, AL_E_FORMAT, "%s line %d: id %d has an empty token string", path,
                         member_line(buf, len, k), id);
            break;
        }
        tokens[id] = key;
    }
    free(buf);
    if (rc) {
        free(tokens);
        cJSON_Delete(j);
        return rc;
    }
    *root = j;
    *tokens_out = tokens;
    *n_out = n;
    return 0;
}

/* vocab.bpe -> merges (pointers into *buf_out, NUL-terminated in place) with their lines. No
 * merge at all is an error unless byte_vocab (a vocabulary of the 256 byte symbols alone, as a
 * byte-level attnlim train checkpoint writes: it needs none) and the file has its #version line. */
static int read_merges(const char *path, int byte_vocab, char **buf_out, const char ***merges_out,
                       int **lines_out, int *n_out, al_error *err) {
    char *buf = NULL;
    size_t len = 0;
    *buf_out = NULL;
    *merges_out = NULL;
    *lines_out = NULL;
    int rc = al__read_file(path, MAX_VOCAB_FILE, &buf, &len, err);
    if (rc) return rc;
    if (memchr(buf, 0, len)) {
        rc = al__err(err, AL_E_FORMAT, "%s line %d: NUL byte in a text file", path,
                     line_of(buf, memchr(buf, 0, len)));
        free(buf);
        return rc;
    }
    size_t cap = 1;
    for (size_t i = 0; i < len; i++) cap += buf[i] == '\n';
    if (cap > (size_t)MAX_VOCAB) {
        free(buf);
        return al__err(err, AL_E_FORMAT, "%s: more than %d lines", path, MAX_VOCAB);
    }
    const char **merges = al__malloc(cap * sizeof *merges, "merges", err);
    int *lines = al__malloc(cap * sizeof *lines, "merge lines", err);
    if (!merges || !lines) {
        free(merges);
        free(lines);
        free(buf);
        return AL_E_NOMEM;
    }
    int n = 0, line = 0, header = 0;
    char *p = buf, *end = buf + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        line++;
        if (le > p && le[-1] == '\r') le--; /* CRLF files ('\r' is not a byte-level symbol) */
        *le = 0;
        if (line == 1 && strncmp(p, "#version", 8) == 0) header = 1;
        if (!(line == 1 && strncmp(p, "#version", 8) == 0) && *p) {
            merges[n] = p;
            lines[n] = line;
            n++;
        }
        p = nl ? nl + 1 : end;
    }
    if (n == 0 && !(byte_vocab && header)) {
        free(merges);
        free(lines);
        free(buf);
        return al__err(err, AL_E_FORMAT, "%s: no merges (expected one 'left right' pair per line)",
                       path);
    }
    *buf_out = buf;
    *merges_out = merges;
    *lines_out = lines;
    *n_out = n;
    return 0;
}

static int is_file(
    const char *p) { /* present (not a directory): the reader refuses what is not a regular file */
    struct stat st;
    return stat(p, &st) == 0 && !S_ISDIR(st.st_mode);
}

/* Finds the two files: NULL -> the shared data (pinned hashes); a directory -> encoder.json +
 * vocab.bpe, else vocab.json + merges.txt, used as they are (any byte-level vocabulary). */
static int find_files(const char *vocab, char *enc, char *mer, size_t cap, al_error *err) {
    if (!vocab || !*vocab) {
        int rc = al_data_find("gpt2/encoder.json", NULL, enc, cap, err);
        if (!rc) rc = al_data_find("gpt2/vocab.bpe", NULL, mer, cap, err);
        return rc;
    }
    struct stat st;
    if (stat(vocab, &st) != 0 || !S_ISDIR(st.st_mode))
        return al__err(err, AL_E_NOTFOUND,
                       "%s: not a directory (expected one holding encoder.json "
                       "+ vocab.bpe, or vocab.json + merges.txt)",
                       vocab);
    snprintf(enc, cap, "%s/encoder.json", vocab);
    snprintf(mer, cap, "%s/vocab.bpe", vocab);
    if (is_file(enc) || is_file(mer)) {
        if (!is_file(enc)) return al__err(err, AL_E_NOTFOUND, "%s: missing (beside %s)", enc, mer);
        if (!is_file(mer)) return al__err(err, AL_E_NOTFOUND, "%s: missing (beside %s)", mer, enc);
        return 0;
    }
    snprintf(enc, cap, "%s/vocab.json", vocab);
    snprintf(mer, cap, "%s/merges.txt", vocab);
    if (is_file(enc) && is_file(mer)) return 0;
    if (is_file(enc)) return al__err(err, AL_E_NOTFOUND, "%s: missing (beside %s)", mer, enc);
    if (is_file(mer)) return al__err(err, AL_E_NOTFOUND, "%s: missing (beside %s)", enc, mer);
    return al__err(
        err, AL_E_NOTFOUND,
        "%s: no encoder.json + vocab.bpe (nor HF vocab.json + merges.txt) in this directory",
        vocab);
}

static int pretok_from_name(const char *name, al__pretok *pre, al_error *err) {
    if (!name || !*name || strcmp(name, "gpt2") == 0)
        *pre = AL_PRE_GPT2;
    else if (strcmp(name, "llama3") == 0 || strcmp(name, "llama-bpe") == 0)
        *pre = AL_PRE_LLAMA3;
    else if (strcmp(name, "smollm") == 0)
        *pre = AL_PRE_SMOLLM;
    else
        return al__err(err, AL_E_UNSUPPORTED,
                       "pre-tokenizer '%s' is not supported (gpt2, llama3, smollm)", name);
    return 0;
}

int al_tokenizer_open_bpe(const char *vocab, const char *pretok, al_tokenizer **out,
                          al_error *err) {
    if (!out) return al__err(err, AL_E_INVALID, "al_tokenizer_open_bpe: NULL output");
    *out = NULL;
    al__pretok pre = AL_PRE_GPT2;
    int rc = pretok_from_name(pretok, &pre, err);
    if (rc) return rc;
    char enc[4096], mer[4096];
    if ((rc = find_files(vocab, enc, mer, sizeof enc, err))) return rc;
    cJSON *root = NULL;
    const char **tokens = NULL, **merges = NULL;
    char *mbuf = NULL;
    int *lines = NULL, n_tok = 0, n_mer = 0;
    al__bpe *b = NULL;
    if ((rc = read_encoder(enc, &root, &tokens, &n_tok, err))) goto done;
    if ((rc = read_merges(mer, n_tok <= 256, &mbuf, &merges, &lines, &n_mer, err))) goto done;
    rc = al__bpe_create_lines(tokens, n_tok, merges, n_mer, lines, mer, pre, &b, err);
    if (rc) {
        if (err && !strstr(err->msg, mer)) al__err_prefix(err, (al_code)rc, "%s + %s", enc, mer);
        goto done;
    }
    /* <|endoftext|>: GPT-2's one special token, when the vocabulary has it */
    int eot = -1;
    for (int i = 0; i < n_tok && eot < 0; i++)
        if (strcmp(tokens[i], "<|endoftext|>") == 0 &&
            !(rc = al__bpe_add_special(b, tokens[i], i, err)))
            eot = i;
    if (rc) goto done;
    rc = al__tokenizer_from_bpe(b, out, err);
    b = NULL;
    /* GPT-2 was trained on text without a BOS; <|endoftext|> is the one its config names */
    if (!rc) al__tokenizer_set_bos(*out, eot, 0, "GPT-2 adds no BOS (the family's convention)");
done:
    al__bpe_free(b);
    free(tokens);
    free(merges);
    free(lines);
    free(mbuf);
    cJSON_Delete(root);
    return rc;
}

int al_tokenizer_open_gpt2(const char *vocab, al_tokenizer **out, al_error *err) {
    return al_tokenizer_open_bpe(vocab, "gpt2", out, err);
}

char *al_framing_json(const al_framing *f) {
    cJSON *o = cJSON_CreateObject();
    if (!o || !f) {
        cJSON_Delete(o);
        return NULL;
    }
    al__framing_json(f, o);
    char *t = al__json_print(cJSON_GetObjectItemCaseSensitive(o, "framing"), 0);
    cJSON_Delete(o);
    return t;
}
