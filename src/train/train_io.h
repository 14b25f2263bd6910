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

/* ---- the training run (trun.c) ---- */
typedef struct al__tr_run_opts {
    al__tr_cfg cfg;        /* vocab_size is set from the tokenizer */
    al__tr_opt opt;        /* opt.steps: the run's total steps */
    int B, T;              /* batch: B sequences of T tokens (T <= n_ctx) */
    uint64_t seed;         /* initialisation and data order */
    int fixed_batch;       /* every step on the batch of step 0 (overfitting check) */
    const char *corpus;    /* "war-and-peace" or a text file */
    const char *data_path; /* al_data_find's explicit path (NULL) */
    const char *tokenizer; /* "bytes" or "gpt2" */
    double val_frac;       /* held-out tail */
    int eval_every;        /* validation loss and diagnostics every K steps (0: only at the end) */
    int val_windows;       /* windows of T tokens of the tail per validation */
    int ckpt_every;        /* checkpoint + state every K steps (0: only at the end) */
    int stop_after;        /* stop (saving) after this many steps of this invocation (0: off) */
    const char *out;       /* the run's directory */
    int resume;            /* continue from out/state.bin */
    const char *init;      /* start from these GPT-2 weights instead of the seeded init */
    const char *dump;      /* write the first step (batch, loss, gradients, updated weights) */
    int progress;          /* 0 off, 1 a bar (a TTY), 2 plain periodic lines */
} al__tr_run_opts;

typedef struct al__tr_summary {
    int steps_done;      /* steps completed in total (with earlier runs) */
    double last_loss;    /* training loss of the last step */
    double val_loss;     /* last validation loss (NaN if none) */
    double tokens_per_s; /* training tokens per second in this invocation */
    double seconds;
} al__tr_summary;

void al__tr_run_defaults(al__tr_run_opts *o);
int al__tr_run(const al__tr_run_opts *o, al__tr_summary *sum, al_error *err);

#endif
