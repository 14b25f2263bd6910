/* cmd_tokenize.c: attnlim tokenize: GPT-2 byte-level BPE encode / decode. */
#include "cli.h"
#include "internal.h"
#include "run_tokens.h"

#include <stdlib.h>
#include <string.h>

enum { O_MODEL = 1, O_TEXT, O_VOCAB, O_PRE, O_CORPUS, O_DATA, O_ALLOW_SPECIAL, O_DECODE, O_JSON };
static const cli_opt opts[] = {
    {O_MODEL, "--model", "M",
     "the tokenizer of model M (a path or a known name: gpt2, smollm2,\n"
     "minilm); --vocab and --pre do not apply with it"},
    {O_TEXT, "--text", "PROMPT", "the prompt itself"},
    {O_VOCAB, "--vocab", "DIR",
     "encoder.json + vocab.bpe (or HF vocab.json + merges.txt);\n"
     "default: the shared GPT-2 files (gpt2/encoder.json, gpt2/vocab.bpe)"},
    {O_PRE, "--pre", "NAME", "pre-tokenizer for that vocabulary (default gpt2)"},
    {O_CORPUS, "--corpus", "NAME", "war-and-peace: the body of METHOD section 1 (or a file path)"},
    {O_DATA, "--data", "DIR", "where the corpus data lives (as ATTNLIM_DATA)"},
    {O_ALLOW_SPECIAL, "--allow-special", NULL,
     "recognise <|endoftext|> in the text as the special token\n"
     "(otherwise it is ordinary text)"},
    {O_DECODE, "--decode", NULL, "read token ids and write their bytes"},
    {O_JSON, "--json", NULL, "one JSON object"},
    CLI_OPT_END,
};

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: attnlim tokenize [--model M | --vocab DIR [--pre gpt2|llama3|smollm]] [--data "
        "DIR]\n"
        "                        (--corpus war-and-peace | --text PROMPT | FILE | -) [--decode]\n"
        "                        [--allow-special] [--json]\n"
        "\n"
        "Encodes the bytes of FILE (- = stdin), or a corpus, with GPT-2's byte-level BPE and\n"
        "prints the token ids, one per line (--json: {\"count\": N, \"ids\": [...]}).\n"
        "--decode reads token ids (white space or comma separated) and writes their bytes\n"
        "(--json: {\"count\", \"bytes\", \"valid_utf8\", \"text\"}).\n"
        "\n");
    cli_print_options(f, opts, 20);
    fprintf(f, "Invalid UTF-8 is encoded byte-level, as tiktoken's _encode_bytes does (a warning\n"
               "names the first invalid byte). Empty input is an error.\n");
}

/* Parses ids from text: white space / comma separated non-negative integers. */
static int parse_ids(const char *name, const char *text, size_t len, int32_t **out, size_t *n,
                     al_error *err) {
    size_t cap = 1024, k = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) goto nomem;
    size_t i = 0;
    int line = 1;
    while (i < len) {
        char c = text[i];
        if (c == '\n') line++;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',') {
            i++;
            continue;
        }
        size_t j = i;
        long long v = 0;
        int ok = 1;
        while (j < len && !(text[j] == ' ' || text[j] == '\t' || text[j] == '\n' ||
                            text[j] == '\r' || text[j] == ',')) {
            if (text[j] < '0' || text[j] > '9')
                ok = 0;
            else if (v <= 1000000000LL) /* larger stays > INT32_MAX: out of range */
                v = v * 10 + (text[j] - '0');
            j++;
        }
        if (!ok) {
            free(ids);
            return al__err(err, AL_E_FORMAT,
                           "%s line %d: '%.*s' is not a token id (a non-negative integer)", name,
                           line, (int)(j - i > 40 ? 40 : j - i), text + i);
        }
        if (v > INT32_MAX) {
            free(ids);
            return al__err(err, AL_E_RANGE, "%s line %d: token id %.*s is out of range", name, line,
                           (int)(j - i > 40 ? 40 : j - i), text + i);
        }
        if (k == cap) {
            cap *= 2;
            int32_t *nv = realloc(ids, cap * sizeof *nv);
            if (!nv) goto nomem;
            ids = nv;
        }
        ids[k++] = (int32_t)v;
        i = j;
    }
    *out = ids;
    *n = k;
    return 0;
nomem:
    free(ids);
    return al__err(err, AL_E_NOMEM, "%s: out of memory reading token ids", name);
}

static int print_ids(const int32_t *ids, size_t n, int json) {
    /* large outputs: a plain buffered loop (cJSON would build one node per id) */
    if (json) {
        printf("{\"count\": %zu, \"ids\": [", n);
        for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
        printf("]}\n");
    } else {
        for (size_t i = 0; i < n; i++) printf("%d\n", ids[i]);
    }
    return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}

int cmd_tokenize(int argc, char **argv) {
    const char *vocab = NULL, *pre = NULL, *corpus = NULL, *input = NULL, *data = NULL,
               *model = NULL;
    int decode = 0, allow_special = 0, json = 0;
    cli_parser p = {"tokenize", argc, argv, opts, usage, 1};
    const char *v;
    for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
        if (id == CLI_STOP) return p.status;
        if (id == O_DECODE) decode = 1;
        if (id == O_ALLOW_SPECIAL) allow_special = 1;
        if (id == O_JSON) json = 1;
        if (id == O_VOCAB) vocab = v;
        if (id == O_PRE) pre = v;
        if (id == O_CORPUS) corpus = v;
        if (id == O_MODEL) model = v;
        if (id == O_DATA) data = v;
        if (id == O_TEXT) {
            if (corpus) return cli_usage_error("tokenize", "give one of --corpus and --text");
            if (!(corpus = cli_text_corpus(v)))
                return cli_usage_error("tokenize", "--text: too many prompts");
        }
        if (id == CLI_POS) {
            if (input)
                return cli_usage_error("tokenize", "more than one input ('%s', '%s')", input, v);
            input = v;
        }
    }
    if (model && (vocab || pre))
        return cli_usage_error("tokenize",
                               "--model uses that model's own tokenizer: %s does not "
                               "apply with it",
                               vocab ? "--vocab" : "--pre");
    if (!!corpus + !!input != 1)
        return cli_usage_error("tokenize", "give exactly one input: --corpus NAME, FILE or -");
    if (decode && corpus)
        return cli_usage_error("tokenize", "--decode reads ids from FILE or -, not a corpus");

    al_error err = {0};
    al_tokenizer *tk = NULL;
    char *text = NULL;
    size_t len = 0;
    int status = 1;
    const char *name = corpus ? corpus : (strcmp(input, "-") == 0 ? "stdin" : input);
    int rc = corpus ? al_corpus_load(corpus, data, &text, &len, &err)
                    : (al_corpus_load(input, NULL, &text, &len, &err));
    if (rc) goto fail;
    if (len == 0) {
        snprintf(err.msg, sizeof err.msg, "%s: empty text (nothing to %s)", name,
                 decode ? "decode" : "tokenize");
        goto fail;
    }
    if (model) { /* that model's tokenizer (GPT-2 BPE, a GGUF's, or an encoder's WordPiece) */
        al_model *m = NULL;
        if (!(rc = al_model_open(model, &m, &err))) rc = al_model_tokenizer(m, &tk, &err);
        if (m) al_model_free(m);
        if (rc) goto fail;
    } else if ((rc = al_tokenizer_open_bpe(vocab, pre, &tk, &err)))
        goto fail;
    if (decode) {
        int32_t *ids = NULL;
        size_t n = 0;
        char *out = NULL;
        size_t olen = 0;
        if ((rc = parse_ids(name, text, len, &ids, &n, &err))) goto fail;
        if (n == 0) {
            free(ids);
            snprintf(err.msg, sizeof err.msg, "%s: no token ids to decode", name);
            goto fail;
        }
        rc = al_detokenize(tk, ids, n, &out, &olen, &err);
        free(ids);
        if (rc) {
            al__err_prefix(&err, (al_code)rc, "%s", name);
            goto fail;
        }
        if (json) {
            cJSON *o = cJSON_CreateObject();
            int valid = al_utf8_valid_len(out, olen) == olen && !memchr(out, 0, olen);
            cJSON_AddNumberToObject(o, "count", (double)n);
            cJSON_AddNumberToObject(o, "bytes", (double)olen);
            cJSON_AddBoolToObject(o, "valid_utf8", valid);
            if (valid)
                cJSON_AddStringToObject(o, "text", out);
            else
                cJSON_AddNullToObject(o, "text");
            cli_print_json(o, 0);
        } else if (fwrite(out, 1, olen, stdout) != olen || fflush(stdout) != 0) {
            free(out);
            snprintf(err.msg, sizeof err.msg, "stdout: write error");
            goto fail;
        }
        free(out);
    } else {
        run_tokens_warn_utf8("tokenize", name, text, len); /* the same warning as capture's */
        int32_t *ids = NULL;
        size_t n = 0;
        if ((rc = al_tokenize(tk, text, len, allow_special, &ids, &n, &err))) {
            al__err_prefix(&err, (al_code)rc, "%s", name);
            goto fail;
        }
        int w = print_ids(ids, n, json);
        free(ids);
        if (w) {
            snprintf(err.msg, sizeof err.msg, "stdout: write error");
            goto fail;
        }
    }
    status = 0;
fail:
    if (status) cli_fail("tokenize", &err);
    al_tokenizer_free(tk);
    free(text);
    return status;
}
