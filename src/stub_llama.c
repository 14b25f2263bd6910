/* stub_llama.c: placeholder until its module lands (the owner deletes this file). */
#include "model.h"

int al__llama_open_gguf(al_model *m, const char *path, al_error *err) {
    (void)m;
    return al__err(err, AL_E_UNSUPPORTED, "%s: GGUF models are not supported yet", path);
}
