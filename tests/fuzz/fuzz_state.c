/*
 * tests/fuzz/fuzz_state.c - the training-state file of a checkpoint: it must
 * load (checksum verified, finite moments) or be refused with a message.
 */
#include <math.h>
#include <string.h>

#include "tests/fuzz/fuzz_util.h"
#include "train/state.h"

const GPTShape FUZZ_STATE_SHAPE = {4, 32, 128, 1, 1, 4};
#define FUZZ_STATE_SITE_BYTES 24

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    char path[64], err[1024];
    int fd = fuzz_file(data, n, path, sizeof(path));
    ParamLayout pl;
    params_layout(&pl, FUZZ_STATE_SHAPE, 1, 0);
    StateExpect want = {7, 1, 1, 0, pl.total, FUZZ_STATE_SITE_BYTES, &pl};
    StateData sd;
    if (state_read(path, &want, &sd, err, sizeof(err)) == 0) {
        for (size_t i = 0; i < pl.total; i++) if (!isfinite(sd.m[i]) || !(sd.v[i] >= 0.0f)) abort();
        state_free(&sd);
    }
    close(fd);
    return 0;
}
