/* stub_fetch.c: placeholder until the model fetcher lands (the owner deletes this file). */
#include "model.h"

int al__model_resolve_name(const char *name, char *out, size_t out_size, al_error *err) {
    (void)out;
    (void)out_size;
    return al__err(err, AL_E_NOTFOUND, "%s: no such file, and not a known model name", name);
}
