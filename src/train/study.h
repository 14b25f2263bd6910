/* study.h: attnlim study (study.c, study_report.c): one model per normalizer trained at the
 * same budget, then the library's reproduce --readings all and diagnose on each checkpoint
 * (loaded with its normalizer and tokenizer), and a report built from their results. */
#ifndef AL_STUDY_H
#define AL_STUDY_H

#include "train_io.h"

#define AL__STUDY_MAX_NORMS 16

typedef struct al__study_norm {
    char name[32]; /* as given: "softmax", "entmax:1.3", "ssmax", "ssmax-fixed", ... */
    al_norm nm;
    int ssmax_learn;
} al__study_norm;

typedef struct al__study_opts {
    al_study_opts pub; /* as given (pub.base: model, data, optimizer, batch, seed of every run) */
    al__study_norm norms[AL__STUDY_MAX_NORMS]; /* pub.normalizers parsed */
    int n_norms;
} al__study_opts;

/* "softmax,sparsemax,entmax15,entmax:1.3,ssmax,sa-softmax" into o->norms (ssmax: s learnable per
 * head; ssmax-fixed: fixed; ssmax:S / ssmax-fixed:S set the initial / fixed s). */
int al__study_parse_norms(const char *list, al__study_opts *o, al_error *err);
void al__study_defaults(al__study_opts *o);
/* Trains (or resumes) every run into OUT/runs/NAME, diagnoses each into OUT/runs/NAME/diag.json,
 * then writes OUT/study.json, OUT/study.csv, OUT/figures/ and OUT/report.html. */
int al__study_run(const al__study_opts *o, al_error *err);

/* One run's entry of the report (study.c): al_reproduce --readings all and al_diagnose on the
 * checkpoint in run_dir over the held-out text file `text`, and the log's validation loss. */
int al__study_diagnose(const al__study_opts *o, const al__study_norm *sn, const char *run_dir,
                       const char *text, cJSON **out, al_error *err);

/* The values of key in the lines of DIR/log.jsonl that have it, against "step". */
typedef struct al__study_curve {
    int n;
    double *x, *y; /* [n] */
} al__study_curve;
int al__study_log_curve(const char *dir, const char *key, al__study_curve *c, al_error *err);
void al__study_curve_free(al__study_curve *c);
/* The report of the diagnosed runs (study_report.c): runs[n] are the diag.json objects. */
int al__study_report(const al__study_opts *o, cJSON *const *runs, int n, al_error *err);

#endif
