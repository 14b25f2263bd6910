/* own_tokens.c: models that bring their own tokens (attention dumps, docs/dumps.md): the options
 * they allow, and a preflight of what each job reads. */
#include "experiments.h"

/* ---- attention dumps: a model that brings its own tokens (docs/dumps.md)
 * ------------------------------------------------------------- */

/* For a model with its own token sequence (*n_own > 0 after the call: an attention dump),
 * checks the options against it: no corpus (corpus_given), window 0 only (bad_window: the
 * option asking for more, or NULL), and, when o is given (reproduce), L <= T, or L = T for a
 * bidirectional dump, whose grids then become {T} (one_L holds that grid). label receives the
 * corpus name the outputs show; o->corpus is set to it. */
int al__ex_own_tokens_opts(al_model *m, const char *corpus_given, const char *bad_window,
                           al_repro_opts *o, int *one_L, const int32_t **own, int *n_own,
                           char *label, size_t label_size, al_error *err) {
    int known = 0;
    int rc = al__model_own_tokens(m, own, n_own, &known, err);
    if (rc || *n_own == 0) return rc;
    const al_model_info *mi = al_model_get_info(m);
    const int T = *n_own;
    if (corpus_given)
        return al__err(err, AL_E_INVALID,
                       "%s: an attention dump brings its own tokens (the %d it holds attention "
                       "for): no --corpus (%s)",
                       mi->path, T, corpus_given);
    if (bad_window)
        return al__err(err, AL_E_INVALID,
                       "%s: an attention dump holds one window (its %d tokens): %s is not "
                       "possible (window 0 only)",
                       mi->path, T, bad_window);
    if (T < 2)
        return al__err(err, AL_E_INVALID, "%s: the dump holds %d token; the experiments need 2",
                       mi->path, T);
    snprintf(label, label_size, "the dump's %d tokens (%s)", T,
             known ? "token_ids of its manifest" : "no token ids recorded");
    if (!o) return 0;
    for (int i = 0; o->lengths && i < o->n_lengths; i++)
        if (o->lengths[i] > T || (!mi->causal && o->lengths[i] != T))
            return al__err(err, AL_E_INVALID,
                           "--lengths: %d, but %s holds attention over T = %d tokens%s",
                           o->lengths[i], mi->path, T,
                           mi->causal ? " (L <= T: a causal dump serves every prefix)"
                                      : " and is bidirectional (L = T only)");
    if (o->long_length > T || (!mi->causal && o->long_length && o->long_length != T))
        return al__err(err, AL_E_INVALID, "--long-length: %d, but %s holds T = %d tokens%s",
                       o->long_length, mi->path, T,
                       mi->causal ? "" : " and is bidirectional (L = T only)");
    if (!mi->causal) {
        *one_L = T;
        if (!o->lengths) o->lengths = one_L, o->n_lengths = 1;
        o->long_length = T;
    }
    o->corpus = label;
    return 0;
}

int al__ex_no_observer(void *user, const al_capture *cap, al_error *err) {
    (void)user, (void)cap, (void)err;
    return 0;
}

/* Before anything is written: can the model serve every job's request (a dump: does it hold
 * the layers, heads and arrays each experiment reads)? */
int al__ex_own_tokens_preflight(const plan *p, al_model *m, al_error *err) {
    for (int i = 0; i < p->n_jobs; i++) {
        const job *j = &p->jobs[i];
        al_capture_request req = {.what = al__ex_job_what(p, j), .fn = al__ex_no_observer};
        int rc = al__model_check(m, j->L, &req, err);
        if (rc)
            return al__err_prefix(err, rc, "L = %d (%s)", j->L,
                                  j->is_long ? "the vanishing study and Algorithms 2, 4, 5 read "
                                               "weights, logits, q, k and the vectors"
                                             : "Algorithms 1 and 3 read weights and the vectors");
    }
    return 0;
}
