/* train_io.h: checkpoints, training state and the training run (tckpt.c, trun.c). */
#ifndef AL_TRAIN_IO_H
#define AL_TRAIN_IO_H

#include "train.h"

#include <cjson/cJSON.h>

/* One tensor to write into a safetensors file. */
typedef struct al__tr_tensor {
    char name[128];
    char dtype[8]; /* "F32", "F64", "I32" */
    int ndim;
    int64_t shape[2];
    const void *data;
    size_t bytes;
} al__tr_tensor;

/* Writes tensors t[n] as a safetensors file at path (atomically). */
int al__tr_write_tensors(const char *path, const al__tr_tensor *t, int n, al_error *err);
/* The GPT-2 tensors of an arena (params, grads, ...) as entries named prefix + HF name, in
 * checkpoint order, into out[cap]; returns their number (4 + 12 L). */
int al__tr_gpt2_tensors(const al__tr_model *m, const float *arena, const char *prefix,
                        al__tr_tensor *out, int cap);
/* DIR/model.safetensors + DIR/config.json (HF GPT-2 keys, attnlim_normalizer,
 * attnlim_tokenizer, attnlim_train = train_info, whose ownership is taken). */
int al__tr_save_model(const al__tr_model *m, const char *dir, const char *tokenizer,
                      cJSON *train_info, al_error *err);
/* The exact state after `step` steps (parameters, AdamW moments) and its reload; the reload
 * refuses a state of another configuration naming what it holds. */
int al__tr_save_state(const al__tr_model *m, const char *path, uint64_t step, al_error *err);
int al__tr_load_state(al__tr_model *m, const char *path, uint64_t *step, al_error *err);
/* The GPT-2 weights of any checkpoint al_model_open reads, of the run's shape. */
int al__tr_load_init(al__tr_model *m, const char *path, al_error *err);
/* ssmax runs after al__tr_load_init + al__tr_init_extra: the s of every (layer, head) from the
 * checkpoint's config.json (attnlim_normalizer.s_per_head), when it has them (else s stays
 * cfg.norm.ssmax_s); a malformed entry is an error naming the file. */
int al__tr_init_ssmax_s(al__tr_model *m, const char *path, al_error *err);

/* ---- the training run (trun.c): the public options (al_train_opts, include/attnlim.h) ---- */
/* The model and the optimizer of a run's options (vocab_size 0: the run sets it from its
 * tokenizer). */
al__tr_cfg al__tr_cfg_of(const al_train_opts *o);
al__tr_opt al__tr_opt_of(const al_train_opts *o);
/* Trains (or resumes) into o->out (o->size unchecked: al_train checks it). */
int al__tr_run(const al_train_opts *o, al_train_summary *sum, al_error *err);

#endif
