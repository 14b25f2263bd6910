/* tdata.c: the training corpus as token ids, its held-out tail, and the deterministic batches
 * (train.h). */
#include "train.h"

#include <stdlib.h>
#include <string.h>

int al__tr_data_load(const char *corpus, const char *data_path, const char *tokenizer,
                     double val_frac, al__tr_data *d, al_error *err) {
    memset(d, 0, sizeof *d);
    if (!(val_frac > 0 && val_frac < 0.5))
        return al__err(err, AL_E_INVALID, "train: validation fraction %g outside (0, 0.5)",
                       val_frac);
    int bytes = !strcmp(tokenizer, "bytes");
    if (!bytes && strcmp(tokenizer, "gpt2"))
        return al__err(err, AL_E_INVALID, "train: tokenizer '%s' is not bytes or gpt2", tokenizer);
    char *text;
    size_t len;
    int rc = al_corpus_load(corpus, data_path, &text, &len, err);
    if (rc) return rc;
    if (bytes) {
        d->ids = al__malloc((len ? len : 1) * sizeof *d->ids, "corpus tokens", err);
        if (!d->ids) rc = AL_E_NOMEM;
        for (size_t i = 0; !rc && i < len; i++) d->ids[i] = (unsigned char)text[i];
        d->n = len, d->vocab = 256;
    } else {
        al_tokenizer *tk = NULL;
        rc = al_tokenizer_open_gpt2(NULL, &tk, err);
        if (!rc) rc = al_tokenize(tk, text, len, 0, &d->ids, &d->n, err);
        al_tokenizer_free(tk);
        d->vocab = 50257;
    }
    free(text);
    if (!rc && d->n < 64)
        rc = al__err(err, AL_E_INVALID, "train: corpus %s has %zu tokens (need at least 64)",
                     corpus, d->n);
    if (rc) {
        al__tr_data_free(d);
        return rc;
    }
    snprintf(d->tokenizer, sizeof d->tokenizer, "%s", tokenizer);
    d->n_train = d->n - (size_t)((double)d->n * val_frac);
    return 0;
}

void al__tr_data_free(al__tr_data *d) {
    free(d->ids);
    memset(d, 0, sizeof *d);
}

void al__tr_batch(const al__tr_data *d, uint64_t seed, int step, int fixed, int B, int T,
                  int32_t *tokens, int32_t *targets) {
    size_t span =
        d->n_train - (size_t)T; /* offsets 0..span-1 keep T + 1 tokens in the train part */
    for (int b = 0; b < B; b++) {
        uint64_t h =
            al__hash64(seed ^ al__hash64(((uint64_t)(fixed ? 0 : step) << 20) ^ (uint64_t)b));
        size_t o = (size_t)(h % span);
        memcpy(tokens + (size_t)b * T, d->ids + o, (size_t)T * sizeof *tokens);
        memcpy(targets + (size_t)b * T, d->ids + o + 1, (size_t)T * sizeof *targets);
    }
}

void al__tr_val_window(const al__tr_data *d, int k, int n_windows, int T, int32_t *tokens,
                       int32_t *targets) {
    size_t span = d->n - d->n_train - (size_t)T - 1; /* the tail holds T + 1 + span tokens */
    size_t o = d->n_train + (n_windows > 1 ? span * (size_t)k / (size_t)(n_windows - 1) : 0);
    memcpy(tokens, d->ids + o, (size_t)T * sizeof *tokens);
    memcpy(targets, d->ids + o + 1, (size_t)T * sizeof *targets);
}
