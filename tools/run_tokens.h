/* run_tokens.h: the token ids a model run reads (capture, perplexity): a file of ids or a
 * corpus tokenized by the model's own tokenizer, and windows into them (METHOD section 1:
 * window k of length L = tokens [k L, (k + 1) L)). */
#ifndef AL_RUN_TOKENS_H
#define AL_RUN_TOKENS_H

#include "attnlim.h"

typedef struct run_tokens {
    int32_t *ids; /* [n] */
    size_t n;
    int from_corpus;   /* 1: --corpus, 0: --tokens */
    char source[4096]; /* the corpus name or the ids file path */
    char sha256[65];   /* of the ids file, or of the corpus bytes before tokenization */
    double seconds;    /* reading + tokenizing */
} run_tokens;

/* Exactly one of tokens_path (ids separated by whitespace) and corpus (al_corpus_load name or
 * path) is given; ids outside the model's vocabulary are an error naming the position. */
int run_tokens_load(al_model *m, const char *tokens_path, const char *corpus, run_tokens *out,
                    al_error *err);
void run_tokens_free(run_tokens *t);
/* Window k of length L: checks 1 <= L <= the model's context and that the window lies inside
 * the tokens; *out points into t->ids. */
int run_tokens_window(const run_tokens *t, const al_model_info *info, long k, long L,
                      const int32_t **out, al_error *err);

#endif
