/* gpt2.c: the GPT-2 forward with streaming capture (placeholder until the engine lands). */
#include "gpt2.h"

static int gpt2_forward(al_model *m, const int32_t *tokens, int T, const al_capture_request *req, float *logits,
                        float *final_hidden, al_error *err) {
    (void)tokens;
    (void)T;
    (void)req;
    (void)logits;
    (void)final_hidden;
    return al__err(err, AL_E_UNSUPPORTED, "%s: the GPT-2 forward is not implemented yet", m->info.path);
}

static void gpt2_destroy(al_model *m) {
    al__gpt2_release(m->impl);
    m->impl = NULL;
}

const al_model_vtable al__gpt2_vtable = {gpt2_forward, gpt2_destroy, NULL};
