/* run_tokens.h: the token ids a model run reads (capture, perplexity): a file of ids or a
 * corpus tokenized by the model's own tokenizer, and windows into them (METHOD section 1:
 * window k of length L = tokens [k L, (k + 1) L)). */
#ifndef AL_RUN_TOKENS_H
#define AL_RUN_TOKENS_H

#include "cli.h"

typedef struct run_tokens {
    int32_t *ids; /* [n] */
    size_t n;
    int from_corpus;      /* 1: --corpus, 0: --tokens */
    char source[4096];    /* the corpus name or the ids file path */
    char sha256[65];      /* of the ids file, or of the corpus bytes before tokenization */
    double seconds;       /* reading + tokenizing */
    long invalid_utf8_at; /* --corpus: byte offset of the first invalid UTF-8 byte, -1 if none */
    int framed;           /* --corpus: the ids are framed by fr (--tokens: used as given) */
    al_framing fr; /* BOS first / an encoder's [CLS] ... [SEP] windows (attnlim.h al_framing) */
    int32_t *win;  /* [L] the last framed window run_tokens_window made */
} run_tokens;

/* The warning every command that tokenizes text gives (tokenize, capture, perplexity): when
 * text[len] is not valid UTF-8, prints "attnlim CMD: warning: NAME is not valid UTF-8 at byte
 * OFFSET (0xBB); encoded byte-level ..." on stderr. Returns the offset, -1 if the text is valid. */
long run_tokens_warn_utf8(const char *cmd, const char *name, const char *text, size_t len);

/* Exactly one of tokens_path (ids separated by whitespace) and corpus (al_corpus_load name or
 * path) is given; ids outside the model's vocabulary are an error naming the position. cmd
 * names the command in the UTF-8 warning. */
int run_tokens_load(const char *cmd, al_model *m, const char *tokens_path, const char *corpus,
                    run_tokens *out, al_error *err);
void run_tokens_free(run_tokens *t);
/* Window k of length L: checks 1 <= L <= the model's context and that the window lies inside
 * the tokens; *out points into t->ids. */
int run_tokens_window(run_tokens *t, const al_model_info *info, long k, long L, const int32_t **out,
                      al_error *err);
/* The L that takes every token in K windows (no --length): n / K, plus the [CLS] and [SEP] of
 * a wrapped encoder window. */
long run_tokens_all_length(const run_tokens *t, long K);
/* o["framing"]: how the corpus became the windows (al_framing_json), when it is a corpus. */
struct cJSON;
void run_tokens_framing_json(const run_tokens *t, struct cJSON *o);

/* The options every model run takes (capture, perplexity): --model, --tokens, --corpus,
 * --text (a prompt: corpus = cli_text_corpus), --length (optional with --tokens and --text:
 * have_length 0, the caller takes every token), --threads, --json, --allow-nonfinite,
 * --bos/--no-bos (also --bos on|off: BOS first in a --corpus; default the model's own),
 * --eos/--no-eos (tokenizer.json models), --wrap/--no-wrap (encoders' windows [CLS] ... [SEP]). */
typedef struct run_opts {
    const char *model, *tokens, *corpus;
    long length, threads; /* threads 0: the default */
    int have_length, json, allow_nonfinite;
    int bos, eos; /* 0: as the files say, 1 on, 2 off (--bos, --no-bos, --bos on|off) */
    int wrap;     /* encoders' [CLS] ... [SEP] windows: 0 default (on), 1 on, 2 off */
    /* the attention variant inside the forward: --attention, --attention-normalizer,
     * --attention-layers, --attention-heads (NULL: the defaults) */
    const char *attention, *normalizer, *attn_layers, *attn_heads;
} run_opts;

/* Their table (ids RUN_O_*; a command includes it with CLI_MORE(RUN_OPTS)); --json and
 * --allow-nonfinite, whose help differs by command, are in each command's own table, with the
 * ids RUN_O_JSON and RUN_O_ALLOW_NONFINITE. */
enum {
    RUN_O_MODEL = 200,
    RUN_O_TOKENS,
    RUN_O_CORPUS,
    RUN_O_TEXT,
    RUN_O_LENGTH,
    RUN_O_EOS,
    RUN_O_ALLOW_NONFINITE,
    RUN_O_THREADS,
    RUN_O_JSON,
    RUN_O_ATTENTION,
    RUN_O_NORMALIZER,
    RUN_O_ATTN_LAYERS,
    RUN_O_ATTN_HEADS,
    RUN_O_NORMALIZER_MOVED, /* the plain --normalizer: a usage error naming the new spelling */
    RUN_O_NO_EOS,           /* --bos, --no-bos, --wrap, --no-wrap: CLI_FRAMING_OPTS's ids */
    RUN_O_LAST = RUN_O_NO_EOS
};
extern const cli_opt RUN_OPTS[];
/* Takes option id (one of RUN_OPTS's, value v) into o: 1 when taken, 0 when id is not a run
 * option, 2 after printing a usage error (a bad value). */
int run_opts_take(cli_parser *p, int id, const char *v, run_opts *o);
/* After the loop: --model, exactly one of --tokens, --corpus and --text, and --length >=
 * min_length (required with --corpus) (2 after a usage error); applies --threads. */
int run_opts_finish(const char *cmd, run_opts *o, long min_length, const char *min_what);

/* Parses the variant options against m's layers and heads and sets it on m
 * (al_model_set_attention); nothing given: the model's own attention. */
int run_attn_apply(al_model *m, const run_opts *o, al_error *err);

#endif
