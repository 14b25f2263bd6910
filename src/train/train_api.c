/* train_api.c: the public face of training and the normalizer study (include/attnlim.h
 * "Training"): public option structs with a size field, copied field by field to and from the
 * internal ones (train_io.h, study.h). */
#include "study.h"

_Static_assert(AL_STUDY_MAX_L == AL__STUDY_MAX_L, "al_study_opts.crit_L");

#include <string.h>

/* The run options, public <-> internal (every field of al__tr_run_opts but cfg.vocab_size, which
 * the run sets from its tokenizer). */
static void tr_out(const al__tr_run_opts *i, al_train_opts *o) {
    *o = (al_train_opts){.size = sizeof *o,
                         .n_layer = i->cfg.n_layer,
                         .n_head = i->cfg.n_head,
                         .n_embd = i->cfg.n_embd,
                         .n_ctx = i->cfg.n_ctx,
                         .norm = i->cfg.norm,
                         .ssmax_learn = i->cfg.ssmax_learn,
                         .lr = i->opt.lr,
                         .min_lr_frac = i->opt.min_lr_frac,
                         .warmup = i->opt.warmup,
                         .steps = i->opt.steps,
                         .beta1 = i->opt.beta1,
                         .beta2 = i->opt.beta2,
                         .eps = i->opt.eps,
                         .weight_decay = i->opt.weight_decay,
                         .clip = i->opt.clip,
                         .B = i->B,
                         .T = i->T,
                         .seed = i->seed,
                         .fixed_batch = i->fixed_batch,
                         .corpus = i->corpus,
                         .data_path = i->data_path,
                         .tokenizer = i->tokenizer,
                         .val_frac = i->val_frac,
                         .eval_every = i->eval_every,
                         .val_windows = i->val_windows,
                         .ckpt_every = i->ckpt_every,
                         .stop_after = i->stop_after,
                         .out = i->out,
                         .resume = i->resume,
                         .init = i->init,
                         .dump = i->dump,
                         .progress = i->progress};
}

static int tr_in(const al_train_opts *o, al__tr_run_opts *i, al_error *err) {
    if (!o || o->size != sizeof *o)
        return al_error_set(err, AL_E_INVALID,
                            "training options of another version (size %zu, this library's %zu): "
                            "fill them with al_train_defaults",
                            o ? o->size : 0, sizeof *o);
    al__tr_run_defaults(i);
    i->cfg.n_layer = o->n_layer, i->cfg.n_head = o->n_head, i->cfg.n_embd = o->n_embd;
    i->cfg.n_ctx = o->n_ctx, i->cfg.norm = o->norm, i->cfg.ssmax_learn = o->ssmax_learn;
    i->opt.lr = o->lr, i->opt.min_lr_frac = o->min_lr_frac, i->opt.warmup = o->warmup;
    i->opt.steps = o->steps, i->opt.beta1 = o->beta1, i->opt.beta2 = o->beta2;
    i->opt.eps = o->eps, i->opt.weight_decay = o->weight_decay, i->opt.clip = o->clip;
    i->B = o->B, i->T = o->T, i->seed = o->seed, i->fixed_batch = o->fixed_batch;
    i->corpus = o->corpus, i->data_path = o->data_path, i->tokenizer = o->tokenizer;
    i->val_frac = o->val_frac, i->eval_every = o->eval_every, i->val_windows = o->val_windows;
    i->ckpt_every = o->ckpt_every, i->stop_after = o->stop_after, i->out = o->out;
    i->resume = o->resume, i->init = o->init, i->dump = o->dump, i->progress = o->progress;
    return 0;
}

void al_train_defaults(al_train_opts *o) {
    al__tr_run_opts i;
    al__tr_run_defaults(&i);
    tr_out(&i, o);
}

int al_train(const al_train_opts *o, al_train_summary *s, al_error *err) {
    al__tr_run_opts i;
    int rc = tr_in(o, &i, err);
    if (rc) return rc;
    al__tr_summary is;
    if ((rc = al__tr_run(&i, &is, err))) return rc;
    if (s)
        *s = (al_train_summary){is.steps_done, is.last_loss, is.val_loss, is.tokens_per_s,
                                is.seconds};
    return 0;
}

void al_study_defaults(al_study_opts *o) {
    al__study_opts i;
    al__study_defaults(&i);
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    tr_out(&i.base, &o->base);
    o->normalizers = "softmax,sparsemax,entmax15,entmax:1.3,ssmax,sa-softmax";
    o->windows = i.windows, o->n_crit_L = i.n_crit_L, o->out = i.out, o->progress = i.progress;
    memcpy(o->crit_L, i.crit_L, sizeof o->crit_L);
}

int al_study_normalizers(const char *list, int *n, al_error *err) {
    al__study_opts i;
    al__study_defaults(&i);
    int rc = al__study_parse_norms(list, &i, err);
    if (!rc && n) *n = i.n_norms;
    return rc;
}

int al_study(const al_study_opts *o, al_error *err) {
    if (!o || o->size != sizeof *o)
        return al_error_set(err, AL_E_INVALID,
                            "study options of another version: fill them with al_study_defaults");
    if (o->n_crit_L < 0 || o->n_crit_L > AL_STUDY_MAX_L)
        return al_error_set(err, AL_E_INVALID, "study: at most %d critical-N lengths",
                            AL_STUDY_MAX_L);
    al__study_opts i;
    al__study_defaults(&i);
    int rc = tr_in(&o->base, &i.base, err);
    if (!rc && !o->normalizers) rc = al_error_set(err, AL_E_INVALID, "study: no normalizers");
    if (!rc) rc = al__study_parse_norms(o->normalizers, &i, err);
    if (rc) return rc;
    i.windows = o->windows, i.n_crit_L = o->n_crit_L, i.out = o->out, i.progress = o->progress;
    memcpy(i.crit_L, o->crit_L, sizeof i.crit_L);
    return al__study_run(&i, err);
}
