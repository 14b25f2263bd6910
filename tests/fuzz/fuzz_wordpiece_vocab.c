/* fuzz_wordpiece_vocab.c: libFuzzer harness for the WordPiece vocabulary parser (vocab.txt,
 * src/wordpiece.c parse_vocab / al__wordpiece_open) and BERT's tokenizer_config.json
 * (do_lower_case, strip_accents), then the encoder and decoder on the vocabulary loaded.
 *
 * Input: the vocab.txt text, the separator "\n#---\n", the text to encode, and optionally a
 * second separator and a tokenizer_config.json. Without a config the vocabulary is opened
 * directly (al__wordpiece_open, lower-casing and accent stripping on: BERT's defaults); with
 * one, both files go into a tiny BERT checkpoint made once in a private temporary directory
 * (LLVMFuzzerInitialize) and the tokenizer comes from the model (al_model_open +
 * al_model_tokenizer), the path the tools take.
 *
 * Checks, against our own reading of the two files (not the parser's):
 *  - the vocabulary opens exactly when it should: 1..2^22 lines, no NUL byte, and lines
 *    [UNK] [CLS] [SEP] present (a trailing "\r" of a line ignored); a failure names vocab.txt;
 *  - vocab size = the number of lines; decode([i]) is line i;
 *  - any text encodes, deterministically, to [CLS] ... [SEP] (the ids of the last line holding
 *    each: a repeated token takes the later id), every id in range, at most 2 + 6 * len ids;
 *    the ids decode to a NUL-free string;
 *  - a whitespace-only text is [CLS] [SEP];
 *  - a token of the vocabulary made of [a-z0-9] only (<= 100 characters) encodes to itself
 *    alone; upper-cased it still does exactly when lower-casing is on; followed by U+0301
 *    (a combining accent) it still does exactly when accent stripping is on. The flags
 *    expected are read here from the config: do_lower_case (a bool, default true),
 *    strip_accents (a bool or null, default: as do_lower_case), other keys ignored;
 *  - a config that is not a JSON object, or holds either key with another type, makes the
 *    model fail to open, naming tokenizer_config.json. */
#include "attnlim.h"
#include "tokenizer.h"
#include "fuzz_files.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SEP     "\n#---\n"
#define SEP_LEN 6

static char g_dir[256], g_vocab[320], g_direct[320], g_tcfg[320];

/* A BERT of hidden size 2, one layer, one head, all weights zero (finite), F32. */
static void write_tiny_bert(void) {
    static const struct {
        const char *name;
        int rows, cols; /* cols 0: 1-D */
    } T[] = {
        {"embeddings.word_embeddings.weight", 5, 2},
        {"embeddings.position_embeddings.weight", 4, 2},
        {"embeddings.token_type_embeddings.weight", 1, 2},
        {"embeddings.LayerNorm.weight", 2, 0},
        {"embeddings.LayerNorm.bias", 2, 0},
        {"encoder.layer.0.attention.self.query.weight", 2, 2},
        {"encoder.layer.0.attention.self.query.bias", 2, 0},
        {"encoder.layer.0.attention.self.key.weight", 2, 2},
        {"encoder.layer.0.attention.self.key.bias", 2, 0},
        {"encoder.layer.0.attention.self.value.weight", 2, 2},
        {"encoder.layer.0.attention.self.value.bias", 2, 0},
        {"encoder.layer.0.attention.output.dense.weight", 2, 2},
        {"encoder.layer.0.attention.output.dense.bias", 2, 0},
        {"encoder.layer.0.attention.output.LayerNorm.weight", 2, 0},
        {"encoder.layer.0.attention.output.LayerNorm.bias", 2, 0},
        {"encoder.layer.0.intermediate.dense.weight", 2, 2},
        {"encoder.layer.0.intermediate.dense.bias", 2, 0},
        {"encoder.layer.0.output.dense.weight", 2, 2},
        {"encoder.layer.0.output.dense.bias", 2, 0},
        {"encoder.layer.0.output.LayerNorm.weight", 2, 0},
        {"encoder.layer.0.output.LayerNorm.bias", 2, 0},
    };
    char hdr[8192];
    size_t h = 0, off = 0;
    h += (size_t)snprintf(hdr + h, sizeof hdr - h, "{");
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        size_t nb = (size_t)T[i].rows * (T[i].cols ? T[i].cols : 1) * 4;
        char shape[32];
        if (T[i].cols)
            snprintf(shape, sizeof shape, "[%d,%d]", T[i].rows, T[i].cols);
        else
            snprintf(shape, sizeof shape, "[%d]", T[i].rows);
        h +=
            (size_t)snprintf(hdr + h, sizeof hdr - h,
                             "%s\"%s\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                             i ? "," : "", T[i].name, shape, off, off + nb);
        off += nb;
    }
    h += (size_t)snprintf(hdr + h, sizeof hdr - h, "}");
    while (h % 8) hdr[h++] = ' ';
    unsigned char *buf = calloc(1, 8 + h + off);
    if (!buf) abort();
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, hdr, h);
    char p[400];
    snprintf(p, sizeof p, "%s/model.safetensors", g_dir);
    fuzz_put(p, buf, 8 + h + off);
    free(buf);
    static const char cfg[] =
        "{\"model_type\":\"bert\",\"hidden_size\":2,\"num_attention_heads\":1,"
        "\"num_hidden_layers\":1,\"intermediate_size\":2,\"max_position_embeddings\":4,"
        "\"vocab_size\":5,\"type_vocab_size\":1,\"layer_norm_eps\":1e-12,\"hidden_act\":\"gelu\"}";
    snprintf(p, sizeof p, "%s/config.json", g_dir);
    fuzz_put(p, cfg, sizeof cfg - 1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(g_dir, sizeof g_dir, "%s", fuzz_root("wordpiece_vocab"));
    snprintf(g_vocab, sizeof g_vocab, "%s/vocab.txt", g_dir);
    snprintf(g_direct, sizeof g_direct, "%s/direct_vocab.txt", g_dir);
    snprintf(g_tcfg, sizeof g_tcfg, "%s/tokenizer_config.json", g_dir);
    write_tiny_bert();
    return 0;
}

/* ---- our own reading of vocab.txt --------------------------------------------------------- */

typedef struct line {
    const char *s;
    size_t n;
} line;

typedef struct vocab {
    line *v;
    int n;
    int has_nul;
} vocab;

static vocab split_lines(const char *s, size_t len) {
    vocab V = {0};
    size_t cap = 16;
    V.v = malloc(cap * sizeof *V.v);
    if (!V.v) abort();
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && s[j] != '\n') j++;
        size_t n = j - i;
        if (n > 0 && s[i + n - 1] == '\r') n--;
        if (memchr(s + i, 0, n)) V.has_nul = 1;
        if ((size_t)V.n == cap) {
            cap *= 2;
            line *g = realloc(V.v, cap * sizeof *V.v);
            if (!g) abort();
            V.v = g;
        }
        V.v[V.n++] = (line){s + i, n};
        i = j + 1; /* past the '\n' (or the end) */
    }
    return V;
}

static int last_id(const vocab *V, const char *s, size_t n) {
    for (int i = V->n - 1; i >= 0; i--)
        if (V->v[i].n == n && memcmp(V->v[i].s, s, n) == 0) return i;
    return -1;
}

/* ---- our own reading of tokenizer_config.json ----------------------------------------------- */

/* 1 when some object anywhere in j has two members of one name (every pair compared: the
 * library sorts large objects, this is the independent straight loop). */
static int has_duplicate_key(const cJSON *j) {
    for (const cJSON *a = j ? j->child : NULL; a; a = a->next) {
        if (cJSON_IsObject(j))
            for (const cJSON *b = a->next; b; b = b->next)
                if (a->string && b->string && !strcmp(a->string, b->string)) return 1;
        if (has_duplicate_key(a)) return 1;
    }
    return 0;
}

/* 1 when the model must open with this config: a JSON object with no duplicate key (any depth:
 * every JSON we read refuses them) whose do_lower_case is absent or a boolean and whose
 * strip_accents is absent, a boolean or null (at most 1 MiB). */
static int expected_flags(const char *cfg, size_t len, int *lower, int *strip) {
    *lower = 1;
    *strip = -1;
    int ok = 1;
    if (cfg) {
        cJSON *j = len <= (1u << 20) ? cJSON_ParseWithLength(cfg, len) : NULL;
        ok = cJSON_IsObject(j) && !has_duplicate_key(j);
        if (ok) {
            const cJSON *lc = cJSON_GetObjectItemCaseSensitive(j, "do_lower_case");
            const cJSON *sa = cJSON_GetObjectItemCaseSensitive(j, "strip_accents");
            if (lc && !cJSON_IsBool(lc)) ok = 0;
            if (sa && !cJSON_IsBool(sa) && !cJSON_IsNull(sa)) ok = 0;
            if (cJSON_IsBool(lc)) *lower = cJSON_IsTrue(lc);
            if (cJSON_IsBool(sa)) *strip = cJSON_IsTrue(sa);
        }
        cJSON_Delete(j);
    }
    if (*strip < 0) *strip = *lower;
    return ok;
}

/* ---- checks ------------------------------------------------------------------------------ */

static int32_t *encode(const al_tokenizer *tk, const char *s, size_t n, size_t *n_ids) {
    int32_t *ids = NULL;
    al_error err;
    if (al_tokenize(tk, s, n, 1, &ids, n_ids, &err)) {
        fprintf(stderr, "encode failed on a loaded vocabulary: %s\n", err.msg);
        abort();
    }
    return ids;
}

static int is_alone(const int32_t *ids, size_t n, int cls, int id, int sep) {
    return n == 3 && ids[0] == cls && ids[1] == id && ids[2] == sep;
}

static void check_tokenizer(const al_tokenizer *tk, const vocab *V, const char *text, size_t tlen,
                            int lower, int strip) {
    if (al_tokenizer_vocab_size(tk) != V->n) abort();
    int cls = last_id(V, "[CLS]", 5), sep = last_id(V, "[SEP]", 5);
    al_error err;
    size_t n = 0, n2 = 0;
    /* the text of the input */
    int32_t *ids = encode(tk, text, tlen, &n);
    if (n < 2 || ids[0] != cls || ids[n - 1] != sep || n > 2 + 6 * tlen) abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V->n) abort();
    int32_t *again = encode(tk, text, tlen, &n2);
    if (n2 != n || memcmp(ids, again, n * sizeof *ids) != 0) abort();
    char *back = NULL;
    size_t blen = 0;
    if (al_detokenize(tk, ids, n, &back, &blen, &err)) abort();
    if (strlen(back) != blen) abort();
    free(back);
    free(ids);
    free(again);
    /* whitespace only */
    ids = encode(tk, " \t\r\n  ", 6, &n);
    if (n != 2 || ids[0] != cls || ids[1] != sep) abort();
    free(ids);
    /* single ids decode to their line */
    for (int i = 0; i < V->n && i < 32; i++) {
        int32_t one = i;
        if (al_detokenize(tk, &one, 1, &back, &blen, &err)) abort();
        if (blen != V->v[i].n || memcmp(back, V->v[i].s, blen) != 0) abort();
        free(back);
    }
    /* [a-z0-9] tokens: themselves; upper-cased iff lower-casing; + U+0301 iff stripping */
    int checked = 0;
    for (int i = 0; i < V->n && checked < 8; i++) {
        const line *L = &V->v[i];
        if (L->n == 0 || L->n > 100) continue;
        int ok = 1, letter = 0;
        for (size_t k = 0; k < L->n && ok; k++) {
            char c = L->s[k];
            ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
            letter |= c >= 'a' && c <= 'z';
        }
        if (!ok) continue;
        checked++;
        int id = last_id(V, L->s, L->n);
        char buf[110];
        memcpy(buf, L->s, L->n);
        ids = encode(tk, buf, L->n, &n);
        if (!is_alone(ids, n, cls, id, sep)) abort();
        free(ids);
        if (letter) {
            for (size_t k = 0; k < L->n; k++)
                if (buf[k] >= 'a' && buf[k] <= 'z') buf[k] = (char)(buf[k] - 32);
            ids = encode(tk, buf, L->n, &n);
            if (is_alone(ids, n, cls, id, sep) != lower) abort();
            free(ids);
            memcpy(buf, L->s, L->n);
        }
        memcpy(buf + L->n, "\xcc\x81", 2);
        ids = encode(tk, buf, L->n + 2, &n);
        if (is_alone(ids, n, cls, id, sep) != strip) abort();
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *in = (const char *)data;
    const char *s1 = memmem(in, size, SEP, SEP_LEN);
    size_t vlen = s1 ? (size_t)(s1 - in) : size;
    const char *text = s1 ? s1 + SEP_LEN : "";
    size_t tlen = s1 ? size - vlen - SEP_LEN : 0;
    const char *s2 = s1 ? memmem(text, tlen, SEP, SEP_LEN) : NULL;
    const char *cfg = NULL;
    size_t clen = 0;
    if (s2) {
        cfg = s2 + SEP_LEN;
        clen = (size_t)(in + size - cfg);
        tlen = (size_t)(s2 - text);
    }
    vocab V = split_lines(in, vlen);
    int should_open = V.n >= 1 && V.n <= (1 << 22) && !V.has_nul && last_id(&V, "[UNK]", 5) >= 0 &&
                      last_id(&V, "[CLS]", 5) >= 0 && last_id(&V, "[SEP]", 5) >= 0;
    int lower, strip;
    int cfg_ok = expected_flags(cfg, clen, &lower, &strip);
    al_tokenizer *tk = NULL;
    al_model *m = NULL;
    al_error err = {0};
    int rc;
    const char *vpath;
    if (!cfg) {
        vpath = g_direct;
        fuzz_put(g_direct, in, vlen);
        al__wordpiece *w = NULL;
        rc = al__wordpiece_open(g_direct, 1, 1, &w, &err);
        if (rc == 0 && al__tokenizer_from_wordpiece(w, &tk, &err)) abort();
    } else {
        vpath = g_vocab;
        fuzz_put(g_vocab, in, vlen);
        fuzz_put(g_tcfg, cfg, clen);
        int orc = al_model_open(g_dir, &m, &err);
        if ((orc == 0) != cfg_ok) {
            fprintf(stderr,
                    "the tiny BERT %s but its tokenizer_config.json should make it %s: %s\n",
                    orc ? "does not open" : "opens", cfg_ok ? "open" : "fail", err.msg);
            abort();
        }
        if (orc) {
            if (!strstr(err.msg, g_tcfg)) abort(); /* the failure names the config */
            free(V.v);
            return 0;
        }
        rc = al_model_tokenizer(m, &tk, &err);
    }
    if (getenv("AL_FUZZ_VERBOSE")) fprintf(stderr, "open: %s\n", rc ? err.msg : "ok");
    if ((rc == 0) != should_open) {
        fprintf(stderr, "vocab.txt %s but should %s: %s\n", rc ? "failed" : "opened",
                should_open ? "open" : "fail", err.msg);
        abort();
    }
    if (rc) {
        if (!strstr(err.msg, vpath)) abort(); /* the failure names the file */
    } else {
        check_tokenizer(tk, &V, text, tlen, lower, strip);
        al_tokenizer_free(tk);
    }
    al_model_free(m);
    free(V.v);
    return 0;
}
