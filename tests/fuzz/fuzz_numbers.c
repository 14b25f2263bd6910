/* fuzz_numbers.c: libFuzzer harness for the CLI's number parser (al_parse_numbers). */
#include "attnlim.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    al_array a;
    al_error err;
    if (al_parse_numbers((const char *)data, size, "fuzz", &a, &err) == 0) {
        int64_t n = al_array_numel(&a);
        const double *v = a.data;
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(v[i])) __builtin_trap(); /* non-finite values are rejected */
        al_array_free(&a);
    }
    return 0;
}
