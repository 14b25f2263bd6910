/* hf_tokenizer.c: tokenizers of HF model directories (tokenizer.json). */
#include "tokenizer.h"

int al__hf_tokenizer_open(const char *dir, al_tokenizer **out, al_error *err) {
    *out = NULL;
    return al__err(err, AL_E_UNSUPPORTED, "%s/tokenizer.json: not supported yet", dir);
}
