/* fuzz_safetensors.c: libFuzzer harness for the safetensors parser (al__st_parse_buffer) over
 * a whole file image (header length, JSON header, data), with no file access. Every accepted
 * tensor is read in full (and converted to float32 when it is a float type) so that ASan
 * catches any data pointer or size that escapes the buffer. The tensor names also go through
 * the GPT-2 name matcher used by the loader and verify, and the image through the GPT-2
 * loader itself (al__gpt2_from_safetensors) for the shape of the seed tiny_gpt2. */
#include "checkpoint.h"
#include "gpt2.h"
#include "safetensors.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact-size copy: reads past the end are caught */
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    al__st_tensor *t = NULL;
    int n = 0;
    al_error err = {0};
    if (al__st_parse_buffer(buf, size, "fuzz.safetensors", &t, &n, &err) == 0) {
        al__gpt2_cfg cfg = {12, 12, 768, 1024, 50257};
        unsigned sum = 0;
        for (int i = 0; i < n; i++) {
            const al__st_tensor *x = &t[i];
            if (x->nbytes && (x->data < buf || x->data + x->nbytes > buf + size)) abort();
            for (size_t k = 0; k < x->nbytes; k++) sum += x->data[k];
            size_t numel = al__st_numel(x);
            if (numel && numel <= (1u << 20)) {
                float *f = malloc(numel * sizeof *f);
                if (f) {
                    al__st_to_f32(x, f, &err);
                    free(f);
                }
            }
            (void)al__gpt2_spec_find(&cfg, x->name);
            (void)al__gpt2_is_buffer(x->name);
        }
        if (sum == 0xdeadbeef) err.msg[0] = 1; /* keep the reads */
        free(t);
        /* the GPT-2 loader over the same image, for the shape of the seed tiny_gpt2 */
        al__safetensors *st;
        if (al__st_open_buffer(buf, size, "fuzz.safetensors", &st, &err) == 0) {
            al__gpt2_cfg tiny = {1, 1, 4, 4, 8};
            al_model m;
            memset(&m, 0, sizeof m);
            if (al__gpt2_from_safetensors(&m, st, &tiny, "fuzz.safetensors", "fuzz", &err) == 0)
                al__gpt2_release(m.impl);
            else if (!strstr(err.msg, "fuzz.safetensors") && !strstr(err.msg, "expected"))
                abort(); /* loader errors name the file, or the tensor and the file */
        } else {
            abort(); /* it parsed a moment ago */
        }
    } else if (!err.msg[0] || !strstr(err.msg, "fuzz.safetensors")) {
        abort(); /* every rejection names the file */
    }
    free(buf);
    return 0;
}
