/* cmd_embed.c: attnlim embed: sentence embeddings of an encoder (BERT family), mean-pooled over
 * the tokens and L2-normalised, as sentence-transformers does for all-MiniLM-L6-v2. */
#include "cli.h"
#include "internal.h"
#include "ops.h"
#include "run_tokens.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { O_MODEL = 1, O_TEXT, O_FILE, O_COSINE, O_THREADS, O_JSON };
static const cli_opt opts[] = {
    {O_MODEL, "--model", "PATH", "an encoder checkpoint or a known name (minilm)"},
    {O_TEXT, "--text", "S", "a sentence (repeatable)"},
    {O_FILE, "--file", "F", "one sentence per line (empty lines skipped; - reads stdin)"},
    {O_COSINE, "--cosine", NULL,
     "print the pairwise cosine-similarity matrix instead of the vectors"},
    {O_THREADS, "--threads", "N", "compute threads (default: all cores, or OMP_NUM_THREADS)"},
    {O_JSON, "--json", NULL,
     "{\"model\", \"dim\", \"sentences\", \"n_tokens\", \"embeddings\",\n"
     " \"cosine\"}"},
    CLI_OPT_END,
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: attnlim embed --model PATH (--text \"...\" [--text ...] | --file F)\n"
            "                     [--cosine] [--threads N] [--json]\n"
            "\n"
            "Sentence embeddings of an encoder model (BERT family, e.g. --model minilm): each\n"
            "sentence is tokenized with the model's WordPiece tokenizer ([CLS] ... [SEP]), run\n"
            "through the model, and its last hidden states are averaged over all its tokens (the\n"
            "attention mask of a single unpadded sentence) and scaled to unit length, as\n"
            "sentence-transformers all-MiniLM-L6-v2 does. A sentence longer than the model's\n"
            "context (512 tokens) is an error (sentence-transformers would truncate it).\n"
            "\n");
    cli_print_options(f, opts, 15);
}

typedef struct sentences {
    char **s; /* [n] NUL-terminated sentences (owned) */
    int n, cap;
} sentences;

static int add_sentence(sentences *ss, const char *s, size_t len, al_error *err) {
    if (ss->n == ss->cap) {
        int cap = ss->cap ? 2 * ss->cap : 16;
        char **p = realloc(ss->s, (size_t)cap * sizeof *p);
        if (!p) return al__err(err, AL_E_NOMEM, "out of memory for %d sentences", cap);
        ss->s = p;
        ss->cap = cap;
    }
    char *c = al__malloc(len + 1, "sentence", err);
    if (!c) return AL_E_NOMEM;
    memcpy(c, s, len);
    c[len] = 0;
    ss->s[ss->n++] = c;
    return 0;
}

static void free_sentences(sentences *ss) {
    for (int i = 0; i < ss->n; i++) free(ss->s[i]);
    free(ss->s);
}

static int read_lines(const char *path, sentences *ss, al_error *err) {
    char *text = NULL;
    size_t len = 0;
    int rc;
    if (!strcmp(path, "-")) {
        size_t cap = 1 << 16;
        text = al__malloc(cap + 1, "stdin", err);
        if (!text) return AL_E_NOMEM;
        size_t got;
        while ((got = fread(text + len, 1, cap - len, stdin)) > 0) {
            len += got;
            if (len == cap) {
                if (cap >= ((size_t)1 << 30)) {
                    free(text);
                    return al__err(err, AL_E_INVALID, "stdin: more than 1 GiB of text");
                }
                char *p = realloc(text, 2 * cap + 1);
                if (!p) {
                    free(text);
                    return al__err(err, AL_E_NOMEM, "stdin: out of memory");
                }
                text = p;
                cap *= 2;
            }
        }
        text[len] = 0;
    } else if ((rc = al__read_file(path, (size_t)1 << 30, &text, &len, err))) {
        return rc;
    }
    rc = 0;
    for (size_t pos = 0; pos < len && rc == 0;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t l = nl ? (size_t)(nl - (text + pos)) : len - pos;
        size_t e = l;
        if (e > 0 && text[pos + e - 1] == '\r') e--;
        int blank = 1;
        for (size_t i = 0; i < e && blank; i++)
            blank = text[pos + i] == ' ' || text[pos + i] == '\t';
        if (!blank) rc = add_sentence(ss, text + pos, e, err);
        pos += l + 1;
    }
    free(text);
    if (rc == 0 && ss->n == 0)
        rc = al__err(err, AL_E_INVALID, "%s: no sentences (empty file)", path);
    return rc;
}

/* emb[C] = normalise(mean_t hidden[t, :]) over hidden [T, C] (double accumulation). */
static void mean_pool(const float *hidden, int T, int C, float *emb) {
    double norm = 0.0;
    for (int c = 0; c < C; c++) {
        double s = 0.0;
        for (int t = 0; t < T; t++) s += hidden[(size_t)t * C + c];
        emb[c] = (float)(s / T);
        norm += (s / T) * (s / T);
    }
    norm = sqrt(norm);
    for (int c = 0; c < C; c++) emb[c] = norm > 0 ? (float)(emb[c] / norm) : 0.0f;
}

static double dot(const float *a, const float *b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

int cmd_embed(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    int json = 0, cosine = 0;
    long threads = 0;
    sentences ss = {0};
    al_error err = {0};
    cli_parser p = {"embed", argc, argv, opts, usage};
    const char *v;
    for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
        int rc = 0;
        if (id == CLI_STOP) {
            free_sentences(&ss);
            return p.status;
        }
        if (id == O_JSON) json = 1;
        if (id == O_COSINE) cosine = 1;
        if (id == O_MODEL) model = v;
        if (id == O_FILE) file = v;
        if (id == O_TEXT && add_sentence(&ss, v, strlen(v), &err)) {
            free_sentences(&ss);
            return cli_fail("embed", &err);
        }
        if (id == O_THREADS) rc = cli_parse_int(v, "--threads", 1, 1024, &threads, &err);
        if (rc) {
            free_sentences(&ss);
            return cli_usage_error("embed", "%s", err.msg);
        }
    }
    if (!model || (!file && ss.n == 0) || (file && ss.n > 0)) {
        free_sentences(&ss);
        return cli_usage_error("embed",
                               "give --model PATH and either --text S (repeatable) or --file F");
    }
    if (threads) al__set_threads((int)threads);

    al_model *m = NULL;
    al_tokenizer *tk = NULL;
    float *hidden = NULL, *emb = NULL;
    int *ntok = NULL;
    int rc = file ? read_lines(file, &ss, &err) : 0;
    if (rc == 0) rc = al_model_open(model, &m, &err);
    if (rc) goto done;
    const al_model_info *info = al_model_get_info(m);
    if (info->causal) {
        rc = al__err(&err, AL_E_UNSUPPORTED,
                     "%s: a %s model is a decoder; embed takes an encoder (BERT family)",
                     info->path, info->family);
        goto done;
    }
    if ((rc = al_model_tokenizer(m, &tk, &err))) goto done;
    const int C = info->d_model;
    hidden =
        al__malloc((size_t)info->n_ctx * C * sizeof(float), "hidden states", &err); /* [n_ctx, C] */
    emb = al__malloc((size_t)ss.n * C * sizeof(float), "embeddings", &err);         /* [n, C] */
    ntok = al__malloc((size_t)ss.n * sizeof(int), "token counts", &err);            /* [n] */
    if (!hidden || !emb || !ntok) {
        rc = AL_E_NOMEM;
        goto done;
    }
    for (int i = 0; i < ss.n && rc == 0; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if ((rc = al_tokenize(tk, ss.s[i], strlen(ss.s[i]), 0, &ids, &n, &err))) break;
        if (n > (size_t)info->n_ctx) {
            rc = al__err(&err, AL_E_INVALID,
                         "sentence %d has %zu tokens, more than the model's context of %d (%s)",
                         i + 1, n, info->n_ctx, info->path);
        } else {
            ntok[i] = (int)n;
            rc = al_model_forward(m, ids, (int)n, NULL, NULL, hidden, &err);
            for (size_t q = 0; rc == 0 && q < n * (size_t)C; q++)
                if (!isfinite(hidden[q])) { /* NaN/Inf weights reached the hidden states */
                    char cause[2048];
                    run_nonfinite_cause(m, cause, sizeof cause);
                    rc = al__err(&err, AL_E_RANGE,
                                 "sentence %d: the hidden states hold NaN/Inf; %s", i + 1, cause);
                }
            if (rc == 0) mean_pool(hidden, (int)n, C, emb + (size_t)i * C);
        }
        free(ids);
    }
    if (rc) goto done;

    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", info->path);
        cJSON_AddStringToObject(o, "name", info->name);
        cJSON_AddNumberToObject(o, "dim", C);
        cJSON_AddStringToObject(o, "pooling", "mean over tokens, L2-normalised");
        cJSON *sent = cJSON_AddArrayToObject(o, "sentences");
        cJSON *nt = cJSON_AddArrayToObject(o, "n_tokens");
        cJSON *vecs = cJSON_AddArrayToObject(o, "embeddings");
        cJSON *cos = cosine ? cJSON_AddArrayToObject(o, "cosine") : NULL;
        double *row = al__malloc((size_t)(C > ss.n ? C : ss.n) * sizeof(double), "row", &err);
        if (!row) {
            cJSON_Delete(o);
            rc = AL_E_NOMEM;
            goto done;
        }
        for (int i = 0; i < ss.n; i++) {
            cJSON_AddItemToArray(sent, cJSON_CreateString(ss.s[i]));
            cJSON_AddItemToArray(nt, cJSON_CreateNumber(ntok[i]));
            for (int c = 0; c < C; c++) row[c] = emb[(size_t)i * C + c];
            cJSON_AddItemToArray(vecs, cli_json_array_d(row, C));
            if (cos) {
                for (int j = 0; j < ss.n; j++)
                    row[j] = dot(emb + (size_t)i * C, emb + (size_t)j * C, C);
                cJSON_AddItemToArray(cos, cli_json_array_d(row, ss.n));
            }
        }
        free(row);
        cli_print_json(o, 0);
    } else if (cosine) {
        for (int i = 0; i < ss.n; i++)
            for (int j = 0; j < ss.n; j++)
                printf("%.6f%c", dot(emb + (size_t)i * C, emb + (size_t)j * C, C),
                       j + 1 < ss.n ? ' ' : '\n');
    } else {
        for (int i = 0; i < ss.n; i++)
            for (int c = 0; c < C; c++)
                printf("%.8g%c", emb[(size_t)i * C + c], c + 1 < C ? ' ' : '\n');
    }
done:
    free(hidden);
    free(emb);
    free(ntok);
    al_tokenizer_free(tk);
    al_model_free(m);
    free_sentences(&ss);
    return rc ? cli_fail("embed", &err) : 0;
}
