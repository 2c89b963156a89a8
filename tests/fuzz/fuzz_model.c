/*
 * tests/fuzz/fuzz_model.c - the model-file header and loader (llm.c's
 * format with our checksum), for a tiny fixed shape: a file must load
 * (finite, checksum verified when tagged) or be refused with a message.
 */
#include <math.h>
#include <string.h>

#include "tests/fuzz/fuzz_util.h"
#include "model/params.h"

/* the shape of tests/fuzz/seeds.c's model seed */
const GPTShape FUZZ_MODEL_SHAPE = {4, 32, 128, 1, 1, 4};

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    char path[64], err[1024];
    int fd = fuzz_file(data, n, path, sizeof(path));
    ParamLayout pl;
    params_layout(&pl, FUZZ_MODEL_SHAPE, 1, 0);
    float* full = NULL;
    int checked = 0;
    if (params_read_full(path, &pl, &full, &checked, err, sizeof(err)) == 0) {
        size_t total = params_full_count(&pl);
        for (size_t i = 0; i < total; i++) if (!isfinite(full[i])) abort();   /* promised finite */
        free(full);
    } else if (full) {
        abort();   /* an error returns nothing to free */
    }
    close(fd);
    return 0;
}
