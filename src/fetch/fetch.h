/* fetch.h: known model names resolved to the cache, fetched on first use (fetch.c: pip, curl).
 * Depends on base only; model.c (al_model_open) and the CLI's `attnlim fetch` use it. */
#ifndef AL_FETCH_H
#define AL_FETCH_H

#include "internal.h"

/* Resolves a known model name ("smollm2", "minilm", "gpt2") to a path in the cache,
 * fetching it on first use where it can be fetched. Returns AL_E_NOTFOUND for other names. */
int al__model_resolve_name(const char *name, char *out, size_t out_size, al_error *err);

/* A known model's title (SmolLM2-135M-Instruct, all-MiniLM-L6-v2) into name when path is one
 * (fetch.c), rather than a GGUF's general.name or a config's base-model id. */
void al__known_title(const char *path, char *name, size_t size);

#endif
