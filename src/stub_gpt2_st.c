/* stub_gpt2_st.c: placeholder until its module lands (the owner deletes this file). */
#include "model.h"

int al__gpt2_open_safetensors(al_model *m, const char *path, al_error *err) {
    (void)m;
    return al__err(err, AL_E_UNSUPPORTED, "%s: GPT-2 safetensors models are not supported yet", path);
}
