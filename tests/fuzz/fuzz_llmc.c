/* fuzz_llmc.c: libFuzzer harness for the llm.c checkpoint header check (al__llmc_parse_buffer)
 * over a whole file image. When a buffer is accepted, every parameter tensor's byte range
 * (al__llmc_offset) must lie inside it: its first and last bytes are read. */
#include "checkpoint.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    al__llmc_hdr h;
    al_error err = {0};
    if (al__llmc_parse_buffer(buf, size, "fuzz.bin", &h, &err) == 0) {
        unsigned sum = 0;
        size_t end = AL_LLMC_HEADER_BYTES;
        int n = al__gpt2_n_tensors(&h.cfg);
        for (int i = 0; i < n && i < 64; i++) {
            size_t numel, off = al__llmc_offset(&h, i, &numel);
            if (off != end) abort(); /* tensors are contiguous */
            end = off + numel * h.elsize;
            if (end > size) abort();
            if (numel) sum += buf[off] + buf[end - 1];
        }
        if (n <= 64 && end != size) abort(); /* and fill the file exactly */
        if (sum == 0xdeadbeef) err.msg[0] = 1;
    } else if (!strstr(err.msg, "fuzz.bin")) {
        abort();
    }
    free(buf);
    return 0;
}
