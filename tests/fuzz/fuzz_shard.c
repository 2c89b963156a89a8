/*
 * tests/fuzz/fuzz_shard.c - the token-shard header and the loader.
 *
 * Input: a shard file. dataloader_init must either refuse it with a message
 * or accept it; then batches are read and data positions (as a state file
 * would hold them) are checked, which must never read out of bounds.
 */
#include <string.h>

#include "data/shard.h"
#include "tests/fuzz/fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    char path[64], err[1024];
    int fd = fuzz_file(data, n, path, sizeof(path));
    DataLoader dl;
    if (dataloader_init(&dl, path, 2, 4, 1, 2, 256, err, sizeof(err)) == 0) {
        int in[8], tg[8];
        for (int i = 0; i < 3; i++) {
            dataloader_next(&dl, in, tg);
            for (int k = 0; k < 8; k++)
                if (in[k] < 0 || in[k] >= 256 || tg[k] < 0 || tg[k] >= 256) abort();   /* validated at init */
        }
        /* positions taken from the input's last 16 bytes, as a corrupt state file could hold them */
        DataPos p = {0, 0};
        if (n >= 16) memcpy(&p, data + n - 16, 16);
        if (dataloader_pos_check(&dl, p, err, sizeof(err)) == 0) {
            dataloader_seek(&dl, p);
            dataloader_next(&dl, in, tg);
        }
        dataloader_free(&dl);
    }
    close(fd);
    return 0;
}
