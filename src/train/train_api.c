/* train_api.c: the public face of training and the normalizer study (include/attnlim.h
 * "Training"): the public option structs are the ones the trainer and the study take (trun.c,
 * study.c); here only their size check and the study's normalizer list. */
#include "study.h"

#include <string.h>

int al_train(const al_train_opts *o, al_train_summary *s, al_error *err) {
    if (!o || o->size != sizeof *o)
        return al_error_set(err, AL_E_INVALID,
                            "training options of another version (size %zu, this library's %zu): "
                            "fill them with al_train_defaults",
                            o ? o->size : 0, sizeof *o);
    al_train_summary sum;
    int rc = al__tr_run(o, &sum, err);
    if (!rc && s) *s = sum;
    return rc;
}

void al_study_defaults(al_study_opts *o) {
    al__study_opts i;
    al__study_defaults(&i);
    *o = i.pub;
}

int al_study_normalizers(const char *list, int *n, al_error *err) {
    al__study_opts i;
    al__study_defaults(&i);
    int rc = al__study_parse_norms(list, &i, err);
    if (!rc && n) *n = i.n_norms;
    return rc;
}

int al_study(const al_study_opts *o, al_error *err) {
    if (!o || o->size != sizeof *o || o->base.size != sizeof o->base)
        return al_error_set(err, AL_E_INVALID,
                            "study options of another version: fill them with al_study_defaults");
    if (o->n_crit_L < 0 || o->n_crit_L > AL_STUDY_MAX_L)
        return al_error_set(err, AL_E_INVALID, "study: at most %d critical-N lengths",
                            AL_STUDY_MAX_L);
    if (!o->normalizers) return al_error_set(err, AL_E_INVALID, "study: no normalizers");
    al__study_opts i;
    memset(&i, 0, sizeof i);
    i.pub = *o;
    int rc = al__study_parse_norms(o->normalizers, &i, err);
    return rc ? rc : al__study_run(&i, err);
}
