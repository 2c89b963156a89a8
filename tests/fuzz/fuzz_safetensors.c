/*
 * tests/fuzz/fuzz_safetensors.c - the safetensors header parser and reader
 * (model/safetensors.c): any file must be refused with a message, or open
 * with every tensor's byte range inside the data and of the size its shape
 * and dtype need, and then read (or be refused, for other dtypes) without
 * touching memory outside its buffer.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_util.h"
#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    char path[64], err[1024];
    int fd = fuzz_file(data, n, path, sizeof(path));
    StFile sf;
    if (st_open(&sf, path, err, sizeof(err)) == 0) {
        for (int i = 0; i < sf.n; i++) {
            const StTensor* t = &sf.t[i];
            if (t->end > sf.data_len || t->end < t->begin) abort();   /* promised by st_open */
            uint64_t numel = st_numel(t);
            if (numel > (1u << 20)) continue;                          /* keep each run small */
            float* buf = malloc((size_t)(numel ? numel : 1) * sizeof(float));
            if (!buf) abort();
            st_read_f32(&sf, t, buf, err, sizeof(err));
            free(buf);
        }
        int checked;
        st_verify(&sf, &checked, err, sizeof(err));
        st_close(&sf);
    } else if (sf.f || sf.t) {
        abort();   /* an error leaves nothing open */
    }
    close(fd);
    return 0;
}
