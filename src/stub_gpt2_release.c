/* stub_gpt2_release.c: placeholder until src/gpt2_load.c lands (its owner deletes this file). */
#include "gpt2.h"

#include <stdlib.h>

void al__gpt2_release(al__gpt2 *g) { free(g); }
