/* model.h: the internal interface every model family implements (gpt2.c, llama.c, bert.c).
 * al_model_open (model.c) recognises the file and calls the family's open function, which
 * fills the al_model with its vtable and its private state. */
#ifndef AL_MODEL_H
#define AL_MODEL_H

#include "internal.h"

typedef struct al_model_vtable {
    /* Runs the forward (see al_model_forward in attnlim.h); T already checked 1..n_ctx. */
    int (*forward)(al_model *m, const int32_t *tokens, int T, const al_capture_request *req,
                   float *logits, float *final_hidden, al_error *err);
    void (*destroy)(al_model *m); /* frees impl (not m) */
    /* The model's own tokenizer (GPT-2 BPE files, GGUF metadata, vocab.txt). */
    int (*tokenizer)(al_model *m, al_tokenizer **out, al_error *err);
} al_model_vtable;

struct al_model {
    const al_model_vtable *vt;
    al_model_info info;
    void *impl; /* the family's state: weights, mappings, scratch */
};

/* Family openers. path is a file (or an HF directory for gpt2/bert). Each fills m->vt,
 * m->info (everything but sha256) and m->impl; on error leaves m->impl NULL. */
int al__gpt2_open_safetensors(al_model *m, const char *path, al_error *err); /* HF dir or file */
int al__gpt2_open_llmc(al_model *m, const char *path, al_error *err);        /* llm.c .bin */
int al__llama_open_gguf(al_model *m, const char *path, al_error *err);       /* .gguf */
int al__bert_open_safetensors(al_model *m, const char *path, al_error *err); /* HF dir or file */

/* Resolves a known model name ("smollm2", "minilm", "gpt2") to a path in the cache,
 * fetching it on first use where it can be fetched. Returns AL_E_NOTFOUND for other names. */
int al__model_resolve_name(const char *name, char *out, size_t out_size, al_error *err);

#endif
