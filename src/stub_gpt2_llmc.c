/* stub_gpt2_llmc.c: placeholder until its module lands (the owner deletes this file). */
#include "model.h"

int al__gpt2_open_llmc(al_model *m, const char *path, al_error *err) {
    (void)m;
    return al__err(err, AL_E_UNSUPPORTED, "%s: llm.c checkpoints are not supported yet", path);
}
