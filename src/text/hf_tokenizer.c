/* hf_tokenizer.c: one reader of tokenizer.json (the HF `tokenizers` format) onto the BPE
 * engine of bpe.c, for the pipelines of the Llama, Mistral, Qwen2, Gemma and GPT-NeoX families:
 *   - model BPE (vocab, merges as "a b" strings or [a, b] pairs, unk_token, fuse_unk,
 *     byte_fallback, ignore_merges; dropout, continuing_subword_prefix and end_of_word_suffix
 *     must be null);
 *   - normalizer: null, NFC, NFKC (ICU), Prepend, Replace (String patterns), Sequence of those;
 *   - pre_tokenizer: null, ByteLevel (use_regex: the GPT-2 pattern; add_prefix_space), Split
 *     (the file's own Regex or String pattern, behavior Isolated, invert false), Digits,
 *     Metaspace (replacement, prepend_scheme first/always/never, split), Sequence of those
 *     (Metaspace alone);
 *   - added_tokens: matched literally in the raw text before anything else (leftmost, longest
 *     first), as HF does for special tokens and for added tokens marked normalized = false;
 *     [reading] added tokens marked normalized = true are matched on the raw text too;
 *   - BOS/EOS: tokenizer_config.json's add_bos_token / add_eos_token and bos_token / eos_token
 *     when it says so, else the post_processor's TemplateProcessing single template.
 * A vocabulary is byte-level when the pre-tokenizer has a ByteLevel step, raw (SentencePiece
 * style: characters as the initial symbols) otherwise.
 *
 * HF normalizes and pre-tokenizes each segment between added tokens on its own; so do we.
 * Regexes: HF's are Oniguruma; we compile them with PCRE2 after spelling \s and \S out as
 * Unicode White_Space (PCRE2's \s under UCP also matches U+180E, Oniguruma's does not). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#define MAX_TOKENIZER_JSON (256u << 20)
#define MAX_ADDED          65536
#define MAX_NORM           8

typedef enum { N_NFC = 1, N_NFKC, N_PREPEND, N_REPLACE } norm_kind;
typedef struct norm_step {
    norm_kind kind;
    char *a, *b; /* Prepend: a; Replace: a -> b */
} norm_step;

typedef struct added_tok {
    char *text;
    size_t len;
    int32_t id;
    int special;
} added_tok;

struct al__hftok {
    al__bpe *bpe;
    int vocab_size;
    int raw;                  /* SentencePiece-style vocabulary */
    norm_step norm[MAX_NORM]; /* the normalizer steps in order */
    int n_norm;
    int prefix_space; /* ByteLevel add_prefix_space */
    char *ms;         /* Metaspace replacement (NULL: no Metaspace) */
    int ms_prepend;   /* 0 never, 1 first, 2 always */
    added_tok *added; /* [n_added] */
    int n_added;
    int add_bos, add_eos;
    int32_t bos_id, eos_id; /* -1 none */
    const char *bos_from;   /* where add_bos comes from (the files' default) */
    int add_bos_files;      /* the files' add_bos, before any override */
    char name[4096];        /* the tokenizer.json path */
};

void al__hftok_free(al__hftok *t) {
    if (!t) return;
    al__bpe_free(t->bpe);
    for (int i = 0; i < t->n_norm; i++) free(t->norm[i].a), free(t->norm[i].b);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].text);
    free(t->added);
    free(t->ms);
    free(t);
}

static char *dup(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* ---- patterns ------------------------------------------------------------------------------- */

/* clang-format off */
#define WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
           "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
/* clang-format on */
#define GPT2_PATTERN                                                                               \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* An Oniguruma pattern as PCRE2 source (malloc'ed): \s and \S spelled out as White_Space. */
static char *to_pcre2(const char *pat, const char *name, al_error *err) {
    size_t n = strlen(pat), cap = n * 8 + 64, o = 0;
    char *out = malloc(cap);
    if (!out) return al__err(err, AL_E_NOMEM, "out of memory"), NULL;
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        const char *add = NULL;
        char one[3] = {c, 0, 0};
        if (c == '\\' && i + 1 < n) {
            char d = pat[++i];
            if (d == 's') {
                add = in_class ? WS : "[" WS "]";
            } else if (d == 'S') {
                if (in_class) {
                    free(out);
                    al__err(err, AL_E_UNSUPPORTED,
                            "%s: \\S inside a character class is not "
                            "supported in a Split pattern",
                            name);
                    return NULL;
                }
                add = "[^" WS "]";
            } else {
                one[0] = '\\', one[1] = d;
            }
        } else if (c == '[' && !in_class) {
            in_class = 1;
            if (i + 1 < n && pat[i + 1] == '^') one[1] = '^', i++;
            if (i + 1 < n && pat[i + 1] == ']') one[one[1] ? 2 : 1] = ']', i++; /* literal ] */
        } else if (c == ']' && in_class) {
            in_class = 0;
        }
        if (!add) add = one;
        size_t l = strlen(add);
        if (o + l + 1 > cap) {
            cap = (o + l + 1) * 2;
            char *g = realloc(out, cap);
            if (!g) {
                free(out);
                return al__err(err, AL_E_NOMEM, "out of memory"), NULL;
            }
            out = g;
        }
        memcpy(out + o, add, l);
        o += l;
    }
    out[o] = 0;
    return out;
}

/* A literal string as a PCRE2 pattern (malloc'ed): every character escaped as \x{...}. */
static char *literal_pattern(const char *s) {
    size_t n = strlen(s);
    char *out = malloc(n * 12 + 1), *p = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n;) {
        uint32_t cp = (unsigned char)s[i];
        size_t l = 1;
        if (cp >= 0xF0 && i + 3 < n)
            cp = ((cp & 7u) << 18) | ((s[i + 1] & 63u) << 12) | ((s[i + 2] & 63u) << 6) |
                 (s[i + 3] & 63u),
            l = 4;
        else if (cp >= 0xE0 && i + 2 < n)
            cp = ((cp & 15u) << 12) | ((s[i + 1] & 63u) << 6) | (s[i + 2] & 63u), l = 3;
        else if (cp >= 0xC0 && i + 1 < n)
            cp = ((cp & 31u) << 6) | (s[i + 1] & 63u), l = 2;
        p += sprintf(p, "\\x{%X}", (unsigned)cp);
        i += l;
    }
    *p = 0;
    return out;
}

/* ---- pipeline parts ---------------------------------------------------------------------------
 */

static const char *type_of(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(t) && al__utf8_valid_len((const unsigned char *)t->valuestring,
                                                   strlen(t->valuestring)) == strlen(t->valuestring)
               ? t->valuestring
               : NULL;
}

/* A String or Regex pattern object ({"String": s} / {"Regex": r}) as PCRE2 source. */
static char *pattern_of(const cJSON *o, const char *name, al_error *err) {
    const char *lit = str_of(o, "String"), *re = str_of(o, "Regex");
    if (lit) {
        char *p = literal_pattern(lit);
        if (!p) al__err(err, AL_E_NOMEM, "out of memory");
        return p;
    }
    if (re) return to_pcre2(re, name, err);
    al__err(err, AL_E_FORMAT, "%s: a pattern must be {\"String\": ...} or {\"Regex\": ...}", name);
    return NULL;
}

typedef struct pipe {
    char *splits[AL__BPE_MAX_SPLITS];
    int n_splits;
    int byte_level;
} pipe;

static int add_split(pipe *p, char *pat, const char *name, al_error *err) {
    if (!pat) return err ? (int)err->code : AL_E_FORMAT;
    if (p->n_splits == AL__BPE_MAX_SPLITS) {
        free(pat);
        return al__err(err, AL_E_UNSUPPORTED, "%s: more than %d pre-tokenizer steps", name,
                       AL__BPE_MAX_SPLITS);
    }
    p->splits[p->n_splits++] = pat;
    return 0;
}

static int is_true(const cJSON *o, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

/* One pre-tokenizer step (not Sequence). */
static int pre_step(al__hftok *t, pipe *p, const cJSON *o, int alone, const char *name,
                    al_error *err) {
    const char *ty = type_of(o);
    if (!ty) return al__err(err, AL_E_FORMAT, "%s: a pre_tokenizer has no \"type\"", name);
    if (!strcmp(ty, "ByteLevel")) {
        p->byte_level = 1;
        t->prefix_space = is_true(o, "add_prefix_space");
        if (t->prefix_space && (!alone || p->n_splits))
            return al__err(err, AL_E_UNSUPPORTED,
                           "%s: ByteLevel add_prefix_space inside a Sequence is not supported",
                           name);
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(o, "use_regex");
        if (!ur || cJSON_IsTrue(ur)) {
            char *pat = to_pcre2(GPT2_PATTERN, name, err);
            return add_split(p, pat, name, err);
        }
        return 0;
    }
    if (!strcmp(ty, "Split")) {
        const char *beh = str_of(o, "behavior");
        if (!beh || strcmp(beh, "Isolated") != 0 || is_true(o, "invert"))
            return al__err(err, AL_E_UNSUPPORTED,
                           "%s: Split behavior '%.32s'%s is not supported (Isolated is)", name,
                           beh ? beh : "?", is_true(o, "invert") ? " with invert" : "");
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(o, "pattern");
        return add_split(p, pattern_of(pat, name, err), name, err);
    }
    if (!strcmp(ty, "Digits")) {
        int one = is_true(o, "individual_digits");
        return add_split(p, dup(one ? "\\p{N}" : "\\p{N}+"), name, err);
    }
    if (!strcmp(ty, "Metaspace")) {
        const char *rep = str_of(o, "replacement"), *sch = str_of(o, "prepend_scheme");
        if (!alone) return al__err(err, AL_E_UNSUPPORTED, "%s: Metaspace inside a Sequence", name);
        if (!rep || !*rep)
            return al__err(err, AL_E_FORMAT, "%s: Metaspace without replacement", name);
        t->ms = dup(rep);
        t->ms_prepend = !sch                     ? (is_true(o, "add_prefix_space") ? 2 : 0)
                        : !strcmp(sch, "first")  ? 1
                        : !strcmp(sch, "always") ? 2
                        : !strcmp(sch, "never")  ? 0
                                                 : -1;
        if (t->ms_prepend < 0)
            return al__err(err, AL_E_UNSUPPORTED, "%s: Metaspace prepend_scheme '%.32s'", name,
                           sch);
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(o, "split");
        if (!sp || cJSON_IsTrue(sp)) { /* each replacement starts a piece (MergedWithNext) */
            char *r = literal_pattern(rep), pat[256];
            if (!r || strlen(r) > 100) {
                free(r);
                return al__err(err, AL_E_UNSUPPORTED, "%s: Metaspace replacement too long", name);
            }
            snprintf(pat, sizeof pat, "(?s)%s(?:(?!%s).)*|(?:(?!%s).)+", r, r, r);
            free(r);
            return add_split(p, dup(pat), name, err);
        }
        return 0;
    }
    return al__err(err, AL_E_UNSUPPORTED,
                   "%s: pre_tokenizer '%.32s' is not supported (ByteLevel, "
                   "Split, Digits, Metaspace, Sequence are)",
                   name, ty);
}

static int parse_pre(al__hftok *t, pipe *p, const cJSON *o, const char *name, al_error *err) {
    if (!o || cJSON_IsNull(o)) return 0;
    const char *ty = type_of(o);
    if (ty && !strcmp(ty, "Sequence")) {
        const cJSON *e, *list = cJSON_GetObjectItemCaseSensitive(o, "pretokenizers");
        if (!cJSON_IsArray(list))
            return al__err(err, AL_E_FORMAT, "%s: Sequence without pretokenizers", name);
        int n = cJSON_GetArraySize(list), rc;
        cJSON_ArrayForEach(e, list) if ((rc = pre_step(t, p, e, n == 1, name, err))) return rc;
        return 0;
    }
    return pre_step(t, p, o, 1, name, err);
}

static int norm_step_parse(al__hftok *t, const cJSON *o, const char *name, al_error *err) {
    const char *ty = type_of(o);
    if (!ty) return al__err(err, AL_E_FORMAT, "%s: a normalizer has no \"type\"", name);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *e, *list = cJSON_GetObjectItemCaseSensitive(o, "normalizers");
        if (!cJSON_IsArray(list))
            return al__err(err, AL_E_FORMAT, "%s: Sequence without normalizers", name);
        int rc;
        cJSON_ArrayForEach(e, list) if ((rc = norm_step_parse(t, e, name, err))) return rc;
        return 0;
    }
    if (t->n_norm == MAX_NORM)
        return al__err(err, AL_E_UNSUPPORTED, "%s: more than %d normalizers", name, MAX_NORM);
    norm_step *n = &t->norm[t->n_norm];
    if (!strcmp(ty, "NFC") || !strcmp(ty, "NFKC")) {
        n->kind = ty[2] == 'K' ? N_NFKC : N_NFC;
    } else if (!strcmp(ty, "Prepend")) {
        const char *a = str_of(o, "prepend");
        if (!a) return al__err(err, AL_E_FORMAT, "%s: Prepend without a string", name);
        n->kind = N_PREPEND, n->a = dup(a);
    } else if (!strcmp(ty, "Replace")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(o, "pattern");
        const char *a = str_of(pat, "String"), *b = str_of(o, "content");
        if (!a || !*a || !b)
            return al__err(err, AL_E_UNSUPPORTED,
                           "%s: Replace normalizer needs a String pattern and a content", name);
        n->kind = N_REPLACE, n->a = dup(a), n->b = dup(b);
    } else {
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: normalizer '%.32s' is not supported (NFC, NFKC, Prepend, Replace, "
                       "Sequence are)",
                       name, ty);
    }
    if ((n->kind == N_PREPEND || n->kind == N_REPLACE) &&
        (!n->a || (n->kind == N_REPLACE && !n->b)))
        return al__err(err, AL_E_NOMEM, "out of memory");
    t->n_norm++;
    return 0;
}

/* ---- the model and the added tokens ------------------------------------------------------------
 */

/* tokens[V] from model.vocab and added_tokens (ids 0..V-1 each exactly once). */
static int build_vocab(const cJSON *vocab, const cJSON *added, char ***out, int *n_out,
                       const char *name, al_error *err) {
    int n = 0;
    const cJSON *e;
    if (!cJSON_IsObject(vocab))
        return al__err(err, AL_E_FORMAT, "%s: model.vocab is not an object", name);
    int count = cJSON_GetArraySize(vocab) + (cJSON_IsArray(added) ? cJSON_GetArraySize(added) : 0);
    if (count <= 0 || count > (1 << 24))
        return al__err(err, AL_E_FORMAT, "%s: %d vocabulary entries", name, count);
    char **tok = al__calloc((size_t)count, sizeof *tok, "vocabulary", err);
    if (!tok) return AL_E_NOMEM;
    int rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        const cJSON *list = pass ? added : vocab;
        if (pass && !cJSON_IsArray(list)) break;
        cJSON_ArrayForEach(e, list) {
            const cJSON *idj = pass ? cJSON_GetObjectItemCaseSensitive(e, "id") : e;
            const char *text = pass ? str_of(e, "content") : e->string;
            if (!cJSON_IsNumber(idj) || idj->valuedouble < 0 || idj->valuedouble >= count ||
                idj->valuedouble != (int)idj->valuedouble || !text) {
                rc = al__err(err, AL_E_FORMAT, "%s: %s entry '%.64s' has no valid id (0..%d)", name,
                             pass ? "added_tokens" : "model.vocab", text ? text : "?", count - 1);
                break;
            }
            int id = (int)idj->valuedouble;
            if (tok[id] && (!pass || strcmp(tok[id], text) != 0)) {
                rc = al__err(err, AL_E_FORMAT, "%s: id %d is given twice ('%.64s', '%.64s')", name,
                             id, tok[id], text);
                break;
            }
            tok[id] = (char *)text;
            if (id + 1 > n) n = id + 1;
        }
    }
    for (int i = 0; !rc && i < n; i++)
        if (!tok[i])
            rc = al__err(err, AL_E_FORMAT, "%s: no token has id %d (ids must be 0..%d)", name, i,
                         n - 1);
    if (rc) {
        free(tok);
        return rc;
    }
    *out = tok, *n_out = n;
    return 0;
}

/* merges as "a b" strings (pairs [a, b] joined with a space) into *out (strings owned by *pool). */
static int build_merge_list(const cJSON *merges, char ***out, int *n_out, char **pool,
                            const char *name, al_error *err) {
    *out = NULL, *n_out = 0, *pool = NULL;
    if (!merges || cJSON_IsNull(merges)) return 0;
    if (!cJSON_IsArray(merges))
        return al__err(err, AL_E_FORMAT, "%s: model.merges is not a list", name);
    int n = cJSON_GetArraySize(merges), i = 0;
    size_t total = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, merges) {
        if (cJSON_IsString(e)) {
            total += strlen(e->valuestring) + 1;
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            const char *a = cJSON_GetArrayItem(e, 0)->valuestring,
                       *b = cJSON_GetArrayItem(e, 1)->valuestring;
            if (strchr(a, ' ') || strchr(b, ' '))
                return al__err(err, AL_E_UNSUPPORTED, "%s: merge %d has a token with a space", name,
                               i);
            total += strlen(a) + strlen(b) + 2;
        } else {
            return al__err(err, AL_E_FORMAT, "%s: merge %d is neither \"a b\" nor [a, b]", name, i);
        }
        i++;
    }
    char **m = al__calloc((size_t)(n ? n : 1), sizeof *m, "merges", err);
    char *p = al__malloc(total + 1, "merges", err);
    if (!m || !p) {
        free(m), free(p);
        return AL_E_NOMEM;
    }
    *pool = p, i = 0;
    cJSON_ArrayForEach(e, merges) {
        m[i++] = p;
        if (cJSON_IsString(e))
            p += sprintf(p, "%s", e->valuestring) + 1;
        else
            p += sprintf(p, "%s %s", cJSON_GetArrayItem(e, 0)->valuestring,
                         cJSON_GetArrayItem(e, 1)->valuestring) +
                 1;
    }
    *out = m, *n_out = n;
    return 0;
}

static int parse_added(al__hftok *t, const cJSON *added, const char *name, al_error *err) {
    if (!cJSON_IsArray(added)) return 0;
    int n = cJSON_GetArraySize(added);
    if (n > MAX_ADDED) return al__err(err, AL_E_UNSUPPORTED, "%s: %d added tokens", name, n);
    t->added = al__calloc((size_t)(n ? n : 1), sizeof *t->added, "added tokens", err);
    if (!t->added) return AL_E_NOMEM;
    const cJSON *e;
    cJSON_ArrayForEach(e, added) {
        const char *text = str_of(e, "content");
        if (!text || !*text)
            return al__err(err, AL_E_FORMAT, "%s: an added token without content", name);
        added_tok *a = &t->added[t->n_added];
        if (!(a->text = dup(text))) return al__err(err, AL_E_NOMEM, "out of memory");
        a->len = strlen(text);
        a->id = (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble; /* checked */
        a->special = is_true(e, "special");
        t->n_added++;
    }
    return 0;
}

static int parse_model(al__hftok *t, const cJSON *root, const pipe *p, const char *name,
                       al_error *err) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *ty = type_of(m);
    if (!ty) return al__err(err, AL_E_FORMAT, "%s: no \"model\" with a \"type\"", name);
    if (strcmp(ty, "BPE") != 0)
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: tokenizer model '%.32s' is not supported (BPE is)", name, ty);
    const char *bad[] = {"dropout", "continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 3; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(m, bad[i]);
        if (x && !cJSON_IsNull(x) && !(cJSON_IsString(x) && !*x->valuestring))
            return al__err(err, AL_E_UNSUPPORTED, "%s: BPE %s is not supported", name, bad[i]);
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    char **tok = NULL, **merges = NULL, *pool = NULL;
    int n_tok = 0, n_merges = 0;
    int rc =
        build_vocab(cJSON_GetObjectItemCaseSensitive(m, "vocab"), added, &tok, &n_tok, name, err);
    if (!rc)
        rc = build_merge_list(cJSON_GetObjectItemCaseSensitive(m, "merges"), &merges, &n_merges,
                              &pool, name, err);
    al__bpe_opts o = {.pre = AL_PRE_GPT2, .unk_id = -1, .raw_tokens = !p->byte_level};
    o.splits = (const char *const *)p->splits, o.n_splits = p->n_splits;
    o.byte_fallback = is_true(m, "byte_fallback"), o.fuse_unk = is_true(m, "fuse_unk");
    o.ignore_merges = is_true(m, "ignore_merges");
    const char *unk = str_of(m, "unk_token");
    for (int i = 0; !rc && unk && i < n_tok; i++)
        if (!strcmp(tok[i], unk)) o.unk_id = i;
    if (!rc && unk && o.unk_id < 0)
        rc = al__err(err, AL_E_FORMAT, "%s: unk_token '%.64s' is not in the vocabulary", name, unk);
    if (!rc)
        rc = al__bpe_create_opts((const char *const *)tok, n_tok, (const char *const *)merges,
                                 n_merges, NULL, name, &o, &t->bpe, err);
    t->vocab_size = n_tok, t->raw = o.raw_tokens;
    if (!rc) rc = parse_added(t, added, name, err);
    free(tok), free(merges), free(pool);
    return rc;
}

/* ---- BOS / EOS
 * ------------------------------------------------------------------------------------ */

static int32_t id_of(const al__hftok *t, const char *text) {
    for (int i = 0; text && i < t->n_added; i++)
        if (!strcmp(t->added[i].text, text)) return t->added[i].id;
    return -1;
}

/* The post_processor's TemplateProcessing single template: a SpecialToken before the sequence
 * is the BOS, one after it the EOS. */
static void template_specials(al__hftok *t, const cJSON *pp) {
    const char *ty = type_of(pp);
    if (ty && !strcmp(ty, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pp, "processors"))
            template_specials(t, e);
        return;
    }
    if (!ty || strcmp(ty, "TemplateProcessing") != 0) return;
    int seen_seq = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pp, "single")) {
        if (cJSON_GetObjectItemCaseSensitive(e, "Sequence")) {
            seen_seq = 1;
            continue;
        }
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        int32_t id = sp ? id_of(t, str_of(sp, "id")) : -1;
        if (id < 0) continue;
        if (seen_seq)
            t->add_eos = 1, t->eos_id = id;
        else
            t->add_bos = 1, t->bos_id = id, t->bos_from = "tokenizer.json post_processor";
    }
}

static const char *token_text(const cJSON *cfg, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(cfg, key);
    return cJSON_IsString(x) ? x->valuestring : cJSON_IsObject(x) ? str_of(x, "content") : NULL;
}

/* tokenizer_config.json (optional): add_bos_token / add_eos_token and the tokens they add. */
static int read_tokenizer_config(al__hftok *t, const char *dir, al_error *err) {
    char path[4200], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (!al__is_file(path)) return 0;
    int rc = al__read_file(path, 64u << 20, &text, &len, err);
    if (rc) return rc;
    cJSON *c = cJSON_ParseWithLength(text, len);
    free(text);
    if (!c) return al__err(err, AL_E_FORMAT, "%s: not valid JSON", path);
    const char *keys[2] = {"add_bos_token", "add_eos_token"}, *toks[2] = {"bos_token", "eos_token"};
    for (int k = 0; k < 2 && !rc; k++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, keys[k]);
        if (!f || cJSON_IsNull(f)) continue;
        if (!cJSON_IsBool(f)) {
            rc = al__err(err, AL_E_FORMAT, "%s: \"%s\" must be true or false", path, keys[k]);
            break;
        }
        int on = cJSON_IsTrue(f);
        int32_t id = id_of(t, token_text(c, toks[k])); /* kept for the override when off */
        if (id < 0) id = k ? t->eos_id : t->bos_id; /* the template's, when the config names none */
        if (on && id < 0)
            rc = al__err(err, AL_E_FORMAT, "%s: %s is true but %s is not an added token", path,
                         keys[k], toks[k]);
        if (k == 0)
            t->add_bos = on, t->bos_id = id, t->bos_from = "tokenizer_config.json add_bos_token";
        if (k == 1) t->add_eos = on, t->eos_id = id;
    }
    cJSON_Delete(c);
    return rc;
}

/* ---- encoding ---------------------------------------------------------------------------------
 */

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static int buf_put(buf *b, const char *s, size_t n, al_error *err) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *g = realloc(b->p, cap);
        if (!g) return al__err(err, AL_E_NOMEM, "out of memory normalizing text");
        b->p = g, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* The NFC / NFKC of valid UTF-8 s[n] appended to o (ICU, through UTF-16). */
static int norm_run(const UNormalizer2 *nz, const char *s, size_t n, buf *o, al_error *err) {
    if (n > (size_t)INT32_MAX / 4) return al__err(err, AL_E_NOMEM, "text too long to normalize");
    UErrorCode ue = U_ZERO_ERROR;
    int32_t n16 = 0, n2 = 0, n8 = 0, cap2 = (int32_t)n * 3 + 16;
    UChar *u = al__malloc(((size_t)n + 1) * sizeof *u, "normalizer", err);
    UChar *v = al__malloc((size_t)cap2 * sizeof *v, "normalizer", err);
    char *out = al__malloc((size_t)cap2 * 3 + 1, "normalizer", err);
    int rc = !u || !v || !out ? AL_E_NOMEM : 0;
    if (!rc) u_strFromUTF8(u, (int32_t)n + 1, &n16, s, (int32_t)n, &ue);
    if (!rc && !U_FAILURE(ue)) n2 = unorm2_normalize(nz, u, n16, v, cap2, &ue);
    if (!rc && !U_FAILURE(ue)) u_strToUTF8(out, cap2 * 3 + 1, &n8, v, n2, &ue);
    if (!rc && U_FAILURE(ue))
        rc = al__err(err, AL_E_INVALID, "ICU normalizer: %s", u_errorName(ue));
    if (!rc) rc = buf_put(o, out, (size_t)n8, err);
    free(u), free(v), free(out);
    return rc;
}

/* b = NFC / NFKC of b; bytes that are not valid UTF-8 are kept as they are (HF only takes
 * valid text; the valid runs around them are normalized each on its own). */
static int unicode_norm(buf *b, int nfkc, al_error *err) {
    UErrorCode ue = U_ZERO_ERROR;
    const UNormalizer2 *nz = nfkc ? unorm2_getNFKCInstance(&ue) : unorm2_getNFCInstance(&ue);
    if (U_FAILURE(ue))
        return al__err(err, AL_E_UNSUPPORTED, "ICU: no NFC data (%s)", u_errorName(ue));
    buf o = {0};
    int rc = buf_put(&o, "", 0, err);
    for (size_t i = 0; !rc && i < b->n;) {
        size_t v = al__utf8_valid_len((const unsigned char *)b->p + i, b->n - i);
        if (v) rc = norm_run(nz, b->p + i, v, &o, err);
        i += v;
        if (!rc && i < b->n) rc = buf_put(&o, b->p + i++, 1, err); /* one invalid byte */
    }
    free(b->p);
    *b = o;
    return rc;
}

/* b with every occurrence of a replaced by c. */
static int replace_all(buf *b, const char *a, const char *c, al_error *err) {
    size_t la = strlen(a), lc = strlen(c);
    buf o = {0};
    int rc = buf_put(&o, "", 0, err);
    for (size_t i = 0; !rc && i < b->n;) {
        const char *f = memmem(b->p + i, b->n - i, a, la);
        size_t end = f ? (size_t)(f - b->p) : b->n;
        rc = buf_put(&o, b->p + i, end - i, err);
        if (!rc && f) rc = buf_put(&o, c, lc, err);
        i = f ? end + la : b->n;
    }
    free(b->p);
    *b = o;
    return rc;
}

static int prepend(buf *b, const char *a, al_error *err) {
    buf o = {0};
    int rc = buf_put(&o, a, strlen(a), err);
    if (!rc) rc = buf_put(&o, b->p, b->n, err);
    free(b->p);
    *b = o;
    return rc;
}

/* One segment between added tokens: normalizer, then the segment-level pre-tokenizer steps
 * (Metaspace's replacement and prefix, ByteLevel's prefix space). first: it starts the text. */
static int normalize_segment(const al__hftok *t, const char *s, size_t n, int first, buf *b,
                             al_error *err) {
    b->n = 0;
    int rc = buf_put(b, s, n, err);
    for (int i = 0; !rc && i < t->n_norm; i++) {
        const norm_step *st = &t->norm[i];
        if (st->kind == N_NFC || st->kind == N_NFKC)
            rc = unicode_norm(b, st->kind == N_NFKC, err);
        else if (st->kind == N_PREPEND && b->n)
            rc = prepend(b, st->a, err);
        else if (st->kind == N_REPLACE)
            rc = replace_all(b, st->a, st->b, err);
    }
    if (!rc && t->ms) {
        rc = replace_all(b, " ", t->ms, err);
        size_t l = strlen(t->ms);
        int starts = b->n >= l && memcmp(b->p, t->ms, l) == 0;
        if (!rc && !starts && (t->ms_prepend == 2 || (t->ms_prepend == 1 && first)))
            rc = prepend(b, t->ms, err);
    }
    if (!rc && t->prefix_space && b->n && b->p[0] != ' ') rc = prepend(b, " ", err);
    return rc;
}

/* The earliest added token at or after pos (longest at equal positions); -1 if none. */
static int next_added(const al__hftok *t, const char *s, size_t n, size_t pos, int allow_special,
                      size_t *at) {
    int best = -1;
    *at = n;
    for (int k = 0; k < t->n_added; k++) {
        const added_tok *a = &t->added[k];
        if (a->special && !allow_special) continue;
        const char *f = memmem(s + pos, n - pos, a->text, a->len);
        size_t w = f ? (size_t)(f - s) : n;
        if (f && (w < *at || (w == *at && best >= 0 && a->len > t->added[best].len)))
            best = k, *at = w;
    }
    return best;
}

static int push(int32_t **v, size_t *n, size_t *cap, const int32_t *ids, size_t k, al_error *err) {
    if (*n + k > *cap) {
        size_t c = (*n + k) * 2 + 16;
        int32_t *g = realloc(*v, c * sizeof *g);
        if (!g) return al__err(err, AL_E_NOMEM, "out of memory for token ids");
        *v = g, *cap = c;
    }
    if (k) memcpy(*v + *n, ids, k * sizeof *ids);
    *n += k;
    return 0;
}

int al__hftok_encode(const al__hftok *t, const char *text, size_t len, int allow_special,
                     int32_t **ids, size_t *n, al_error *err) {
    *ids = NULL, *n = 0;
    int32_t *v = NULL;
    size_t nv = 0, cap = 0, pos = 0;
    buf b = {0};
    int rc =
        t->add_bos ? push(&v, &nv, &cap, &t->bos_id, 1, err) : push(&v, &nv, &cap, NULL, 0, err);
    while (!rc && pos <= len) {
        size_t at;
        int k = next_added(t, text, len, pos, allow_special, &at);
        if (at > pos) {
            int32_t *seg = NULL;
            size_t ns = 0;
            rc = normalize_segment(t, text + pos, at - pos, pos == 0, &b, err);
            if (!rc) rc = al__bpe_encode(t->bpe, b.p, b.n, 0, &seg, &ns, err);
            if (!rc) rc = push(&v, &nv, &cap, seg, ns, err);
            free(seg);
        }
        if (rc || k < 0) break;
        rc = push(&v, &nv, &cap, &t->added[k].id, 1, err);
        pos = at + t->added[k].len;
    }
    if (!rc && t->add_eos) rc = push(&v, &nv, &cap, &t->eos_id, 1, err);
    free(b.p);
    if (rc) {
        free(v);
        return rc;
    }
    *ids = v, *n = nv;
    return 0;
}

/* Decoding: the engine's bytes; for raw vocabularies <0xXX> tokens become their byte and the
 * Metaspace / Replace character a space (a leading one dropped when the pipeline added it). */
int al__hftok_decode(const al__hftok *t, const int32_t *ids, size_t n, char **text, size_t *len,
                     al_error *err) {
    char *raw;
    size_t rl;
    int rc = al__bpe_decode(t->bpe, ids, n, &raw, &rl, err);
    if (rc || !t->raw) {
        *text = rc ? NULL : raw;
        if (len) *len = rc ? 0 : rl;
        return rc;
    }
    const char *sp = t->ms;
    for (int i = 0; !sp && i < t->n_norm; i++)
        if (t->norm[i].kind == N_REPLACE && !strcmp(t->norm[i].a, " ")) sp = t->norm[i].b;
    size_t sl = sp ? strlen(sp) : 0, o = 0;
    int strip = t->ms ? t->ms_prepend != 0 : 0;
    for (int i = 0; i < t->n_norm; i++) strip |= t->norm[i].kind == N_PREPEND;
    for (size_t i = 0; i < rl;) {
        unsigned hx;
        if (rl - i >= 6 && raw[i] == '<' && raw[i + 1] == '0' && raw[i + 2] == 'x' &&
            raw[i + 5] == '>' && sscanf(raw + i + 3, "%2x", &hx) == 1) {
            raw[o++] = (char)hx, i += 6;
        } else if (sl && rl - i >= sl && memcmp(raw + i, sp, sl) == 0) {
            raw[o++] = ' ', i += sl;
        } else {
            raw[o++] = raw[i++];
        }
    }
    size_t skip = strip && o && raw[0] == ' ' ? 1 : 0;
    memmove(raw, raw + skip, o - skip);
    raw[o - skip] = 0;
    *text = raw;
    if (len) *len = o - skip;
    return 0;
}

int al__hftok_vocab_size(const al__hftok *t) {
    return t->vocab_size;
}

void al__hftok_bos(const al__hftok *t, int32_t *id, int *dflt, const char **from) {
    *id = t->bos_id, *dflt = t->add_bos_files;
    *from = t->bos_from ? t->bos_from : "tokenizer.json and tokenizer_config.json add none";
}

void al__hftok_set_bos_eos(al__hftok *t, int add_bos, int add_eos) {
    if (add_bos >= 0) t->add_bos = add_bos && t->bos_id >= 0;
    if (add_eos >= 0) t->add_eos = add_eos && t->eos_id >= 0;
}

/* ---- opening ----------------------------------------------------------------------------------
 */

int al__hftok_parse(const char *text, size_t len, const char *name, al__hftok **out,
                    al_error *err) {
    *out = NULL;
    al__hftok *t = al__calloc(1, sizeof *t, "tokenizer", err);
    if (!t) return AL_E_NOMEM;
    t->bos_id = t->eos_id = -1;
    snprintf(t->name, sizeof t->name, "%s", name);
    pipe p = {0};
    cJSON *j = cJSON_ParseWithLength(text, len);
    int rc = j && cJSON_IsObject(j) ? 0 : al__err(err, AL_E_FORMAT, "%s: not a JSON object", name);
    if (!rc) {
        const cJSON *nz = cJSON_GetObjectItemCaseSensitive(j, "normalizer");
        if (nz && !cJSON_IsNull(nz)) rc = norm_step_parse(t, nz, name, err);
    }
    if (!rc) rc = parse_pre(t, &p, cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer"), name, err);
    if (!rc) rc = parse_model(t, j, &p, name, err);
    for (int i = 0; !rc && i < t->n_added; i++) {
        const cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "added_tokens"), i);
        if (is_true(e, "single_word") || is_true(e, "lstrip") || is_true(e, "rstrip"))
            rc = al__err(err, AL_E_UNSUPPORTED,
                         "%s: added token '%.64s' with single_word/lstrip/rstrip is not supported",
                         name, t->added[i].text);
    }
    if (!rc) template_specials(t, cJSON_GetObjectItemCaseSensitive(j, "post_processor"));
    if (!rc) t->add_bos_files = t->add_bos;
    for (int i = 0; i < p.n_splits; i++) free(p.splits[i]);
    cJSON_Delete(j);
    if (rc) {
        al__hftok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---- from fields (GGUF metadata) ------------------------------------------------------------- */

#define LLAMA3_PATTERN                                                                             \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_PATTERN                                                                              \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"      \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* GGUF pre-tokenizer names (llama.cpp's tokenizer.ggml.pre) as the HF pipelines of the
 * tokenizer.json files they come from: the Split patterns (as those files spell them) before
 * ByteLevel, the NFC normalizer where the file has it (Qwen2; GPT-NeoX-20B's, which OLMo and
 * Pythia share), ignore_merges and BOS by default where the file says so (Llama 3). */
typedef struct pre_def {
    const char *names[3];
    const char *pats[2];
    int nfc, ignore_merges, bos;
} pre_def;
static const pre_def PRES[] = {
    {{"default", "gpt-2", "gpt2"}, {GPT2_PATTERN, NULL}, 0, 0, 0},
    {{"llama-bpe", "llama3", "llama-v3"}, {LLAMA3_PATTERN, NULL}, 0, 1, 1},
    {{"qwen2", NULL, NULL}, {QWEN2_PATTERN, NULL}, 1, 0, 0},
    {{"smollm", NULL, NULL}, {"\\p{N}", GPT2_PATTERN}, 0, 0, 0},
    {{"olmo", NULL, NULL}, {GPT2_PATTERN, NULL}, 1, 0, 0},
};

const char *al__hftok_pre_names(void) {
    return "default, gpt-2, gpt2, llama-bpe, llama3, llama-v3, qwen2, smollm, olmo";
}

static const pre_def *pre_find(const char *name) {
    for (size_t i = 0; i < sizeof PRES / sizeof *PRES; i++)
        for (int k = 0; k < 3; k++)
            if (PRES[i].names[k] && !strcmp(PRES[i].names[k], name ? name : "default"))
                return &PRES[i];
    return NULL;
}

/* The normalizer and pre-tokenizer of the spec's model into t and p. */
static int spec_pipeline(al__hftok *t, pipe *p, const al__tok_spec *s, const pre_def *pd,
                         al_error *err) {
    norm_step *n = t->norm;
    if (!pd) { /* SentencePiece: (prefix) ▁ for every space, one piece per segment */
        if (s->add_space_prefix) n[t->n_norm].kind = N_PREPEND, n[t->n_norm++].a = dup("\u2581");
        n[t->n_norm].kind = N_REPLACE, n[t->n_norm].a = dup(" "), n[t->n_norm++].b = dup("\u2581");
        for (int i = 0; i < t->n_norm; i++)
            if (!n[i].a || (n[i].kind == N_REPLACE && !n[i].b))
                return al__err(err, AL_E_NOMEM, "out of memory");
        return 0;
    }
    if (pd->nfc) n[t->n_norm++].kind = N_NFC;
    p->byte_level = 1;
    int rc = 0;
    for (int i = 0; i < 2 && pd->pats[i] && !rc; i++)
        rc = add_split(p, to_pcre2(pd->pats[i], s->name, err), s->name, err);
    return rc;
}

/* GGUF token types 2 (unknown), 3 (control), 4 (user-defined): added tokens, matched in the
 * raw text as HF matches its added tokens (special unless user-defined). */
static int spec_added(al__hftok *t, const al__tok_spec *s, al_error *err) {
    int n = 0;
    for (int i = 0; s->types && i < s->n_tokens; i++)
        n += s->types[i] >= 2 && s->types[i] <= 4 && s->tokens[i][0];
    if (n > MAX_ADDED)
        return al__err(err, AL_E_UNSUPPORTED, "%s: %d control/user-defined tokens (at most %d)",
                       s->name, n, MAX_ADDED);
    t->added = al__calloc((size_t)(n ? n : 1), sizeof *t->added, "added tokens", err);
    if (!t->added) return AL_E_NOMEM;
    for (int i = 0; s->types && i < s->n_tokens; i++) {
        if (!(s->types[i] >= 2 && s->types[i] <= 4 && s->tokens[i][0])) continue;
        added_tok *a = &t->added[t->n_added];
        size_t len = strlen(s->tokens[i]);
        if (al__utf8_valid_len((const unsigned char *)s->tokens[i], len) != len)
            return al__err(err, AL_E_FORMAT, "%s: token %d (type %d) is not valid UTF-8", s->name,
                           i, s->types[i]);
        if (!(a->text = dup(s->tokens[i]))) return al__err(err, AL_E_NOMEM, "out of memory");
        a->len = len, a->id = i, a->special = s->types[i] != 4;
        t->n_added++;
    }
    return 0;
}

/* BOS / EOS: the ids (checked) and whether to add them (the file's flag, else the default). */
static int spec_bos_eos(al__hftok *t, const al__tok_spec *s, const pre_def *pd, al_error *err) {
    int32_t ids[2] = {s->bos_id, s->eos_id};
    int flag[2] = {s->add_bos, s->add_eos};
    const char *what[2] = {"bos", "eos"};
    for (int k = 0; k < 2; k++) {
        if (ids[k] < -1 || ids[k] >= s->n_tokens)
            return al__err(err, AL_E_FORMAT, "%s: %s_token_id %d is outside the %d tokens", s->name,
                           what[k], ids[k], s->n_tokens);
        if (flag[k] > 0 && ids[k] < 0)
            return al__err(err, AL_E_FORMAT, "%s: add_%s_token is true but there is no %s_token_id",
                           s->name, what[k], what[k]);
    }
    t->bos_id = ids[0], t->eos_id = ids[1];
    t->add_bos = (flag[0] >= 0 ? flag[0] : !pd || pd->bos) && ids[0] >= 0;
    t->add_eos = flag[1] > 0 && ids[1] >= 0;
    return 0;
}

int al__hftok_from_spec(const al__tok_spec *s, al__hftok **out, al_error *err) {
    *out = NULL;
    int sp = s->model && !strcmp(s->model, "llama"), bl = s->model && !strcmp(s->model, "gpt2");
    if (!sp && !bl)
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: tokenizer model '%.64s' is not supported ('llama' SentencePiece-style "
                       "BPE, 'gpt2' byte-level BPE are)",
                       s->name, s->model ? s->model : "");
    const pre_def *pd = bl ? pre_find(s->pre) : NULL;
    if (bl && !pd)
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: tokenizer pre-tokenizer '%.64s' is not supported (%s are)", s->name,
                       s->pre, al__hftok_pre_names());
    if (sp && !s->scores)
        return al__err(err, AL_E_FORMAT, "%s: a 'llama' tokenizer without tokenizer.ggml.scores",
                       s->name);
    if (bl && s->n_merges <= 0)
        return al__err(err, AL_E_FORMAT, "%s: a 'gpt2' tokenizer without tokenizer.ggml.merges",
                       s->name);
    if (s->unk_id < -1 || s->unk_id >= s->n_tokens)
        return al__err(err, AL_E_FORMAT, "%s: unknown_token_id %d is outside the %d tokens",
                       s->name, s->unk_id, s->n_tokens);
    al__hftok *t = al__calloc(1, sizeof *t, "tokenizer", err);
    if (!t) return AL_E_NOMEM;
    snprintf(t->name, sizeof t->name, "%s", s->name);
    pipe p = {0};
    int rc = spec_pipeline(t, &p, s, pd, err);
    al__bpe_opts o = {.raw_tokens = sp,
                      .byte_fallback = sp,
                      .fuse_unk = sp,
                      .unk_id = sp ? s->unk_id : -1,
                      .ignore_merges = pd && pd->ignore_merges,
                      .scores = sp ? s->scores : NULL};
    o.splits = (const char *const *)p.splits, o.n_splits = p.n_splits;
    if (!rc)
        rc = al__bpe_create_opts(s->tokens, s->n_tokens, sp ? NULL : s->merges,
                                 sp ? 0 : s->n_merges, NULL, s->name, &o, &t->bpe, err);
    t->vocab_size = s->n_tokens, t->raw = sp;
    if (!rc) rc = spec_added(t, s, err);
    if (!rc) rc = spec_bos_eos(t, s, pd, err);
    for (int i = 0; i < p.n_splits; i++) free(p.splits[i]);
    if (rc) {
        al__hftok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int al__hftok_open_dir(const char *dir, al__hftok **out, al_error *err) {
    *out = NULL;
    char path[4200], *text;
    size_t len;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    int rc = al__read_file(path, MAX_TOKENIZER_JSON, &text, &len, err);
    if (rc) return rc;
    al__hftok *t = NULL;
    rc = al__hftok_parse(text, len, path, &t, err);
    free(text);
    if (!rc) rc = read_tokenizer_config(t, dir, err);
    if (!rc) t->add_bos_files = t->add_bos;
    if (rc) {
        al__hftok_free(t);
        return rc;
    }
    *out = t;
    return 0;
}
