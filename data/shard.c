/*
 * data/shard.c - writing token shards and the data loader over them.
 *
 * See shard.h for the file format and the batch semantics. Two rules shape
 * this file:
 *   - Everything a user can get wrong (a bad path, a file that is not a shard,
 *     a truncated download, tokens from a bigger vocabulary, a shard smaller
 *     than one batch) is found in dataloader_init and RETURNED as a message,
 *     so the trainer can print it once on rank 0 and exit cleanly on all
 *     ranks. After init succeeded, an I/O failure means the disk changed under
 *     us, and the check macros end the run.
 *   - Bytes on disk are little-endian; we decode them byte by byte, so the
 *     code is correct on any host without #ifdefs.
 */
#define _POSIX_C_SOURCE 200809L /* fseeko, glob, stat */
#define _FILE_OFFSET_BITS 64    /* shards over 2 GB on 32-bit hosts */

#include "data/shard.h"

#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "common/check.h"

/* Tokens read per fread when validating a whole shard (2 MB of file). */
#define SHARD_SCAN_BLOCK (1 << 20)

/* ----------------------------------------------------------------------------
 * helpers */

static int32_t shard_get_le32(const unsigned char* p) {
    uint32_t v = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    return (int32_t)v;
}

static void shard_put_le32(unsigned char* p, int32_t x) {
    uint32_t v = (uint32_t)x;
    p[0] = (unsigned char)(v & 0xff);
    p[1] = (unsigned char)((v >> 8) & 0xff);
    p[2] = (unsigned char)((v >> 16) & 0xff);
    p[3] = (unsigned char)((v >> 24) & 0xff);
}

/* ----------------------------------------------------------------------------
 * writing */

int shard_write(const char* path, const uint16_t* tokens, size_t n, char* err, size_t errlen) {
    if (n > (size_t)SHARD_MAX_TOKENS) {
        return check_errorf(err, errlen, "data error: '%s': %zu tokens do not fit one shard (at most %lld: "
                          "the header's count is an int32); split the data into several shards",
                          path, n, SHARD_MAX_TOKENS);
    }
    size_t plen = strlen(path);
    char* tmp = (char*)mallocCheck(plen + 5);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);

    FILE* f = fopen(tmp, "wb");
    if (!f) {
        int e = errno;
        check_errorf(err, errlen, "data error: cannot create '%s': %s", tmp, strerror(e));
        free(tmp);
        return -1;
    }
    unsigned char hdr[SHARD_HEADER_BYTES];
    memset(hdr, 0, sizeof(hdr));
    shard_put_le32(hdr + 0, SHARD_MAGIC);
    shard_put_le32(hdr + 4, SHARD_VERSION);
    shard_put_le32(hdr + 8, (int32_t)n);
    int ok = fwrite(hdr, 1, sizeof(hdr), f) == sizeof(hdr);

    /* Encode in blocks so the output is little-endian whatever the host is. */
    unsigned char* block = (unsigned char*)mallocCheck(2 * (size_t)SHARD_SCAN_BLOCK);
    for (size_t i = 0; ok && i < n; i += SHARD_SCAN_BLOCK) {
        size_t m = n - i < SHARD_SCAN_BLOCK ? n - i : SHARD_SCAN_BLOCK;
        for (size_t j = 0; j < m; j++) {
            block[2 * j] = (unsigned char)(tokens[i + j] & 0xff);
            block[2 * j + 1] = (unsigned char)(tokens[i + j] >> 8);
        }
        ok = fwrite(block, 2, m, f) == m;
    }
    free(block);
    int e = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (!ok) {
        check_errorf(err, errlen, "data error: writing '%s' failed: %s (is the disk full?)", tmp, strerror(e));
        remove(tmp);
        free(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        check_errorf(err, errlen, "data error: cannot rename '%s' to '%s': %s", tmp, path, strerror(e));
        remove(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

/* ----------------------------------------------------------------------------
 * validation */

/* Check one shard completely: header, size against the header's count, room
 * for one global batch (need tokens), every token < vocab_size. On success
 * stores the token count in *ntok. */
static int shard_validate(const char* path, int vocab_size, int64_t need, const DataLoader* dl,
                          int64_t* ntok, char* err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        return check_errorf(err, errlen, "data error: cannot open '%s': %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        return check_errorf(err, errlen, "data error: '%s' is not a regular file", path);
    }
    FILE* f = fopen(path, "rb");
    if (!f) {
        return check_errorf(err, errlen, "data error: cannot open '%s': %s", path, strerror(errno));
    }
    long long fsize = (long long)st.st_size;
    unsigned char hdr[SHARD_HEADER_BYTES];
    if (fsize < SHARD_HEADER_BYTES || fread(hdr, 1, sizeof(hdr), f) != sizeof(hdr)) {
        fclose(f);
        return check_errorf(err, errlen, "data error: '%s' is %lld bytes, too small for the %d-byte shard header "
                          "(truncated, or not a token shard)", path, fsize, SHARD_HEADER_BYTES);
    }
    int32_t magic = shard_get_le32(hdr), version = shard_get_le32(hdr + 4), count = shard_get_le32(hdr + 8);
    if (magic != SHARD_MAGIC) {
        fclose(f);
        return check_errorf(err, errlen, "data error: '%s': bad magic %d (expected %d): not a token shard in "
                          "llm.c's format; make one with build/prepro", path, (int)magic, SHARD_MAGIC);
    }
    if (version != SHARD_VERSION) {
        fclose(f);
        /* llm.c's version 2 holds uint32 tokens (Llama 3); only GPT-2 style uint16 shards fit here. */
        return check_errorf(err, errlen, "data error: '%s': unsupported shard version %d (expected %d%s)",
                          path, (int)version, SHARD_VERSION,
                          version == 2 ? "; version 2 is llm.c's uint32-token format, not supported" : "");
    }
    if (count < 0) {
        fclose(f);
        return check_errorf(err, errlen, "data error: '%s': negative token count %d in the header", path, (int)count);
    }
    long long expect = (long long)SHARD_HEADER_BYTES + 2LL * count;
    if (fsize != expect) {
        fclose(f);
        return check_errorf(err, errlen, "data error: '%s' is %lld bytes but its header promises %d tokens "
                          "(%lld bytes): the file is %s", path, fsize, (int)count, expect,
                          fsize < expect ? "truncated" : "corrupt (trailing bytes)");
    }
    if ((int64_t)count < need) {
        fclose(f);
        return check_errorf(err, errlen, "data error: '%s' has %d tokens, but one global batch needs "
                          "dp_size*B*T+1 = %d*%d*%d+1 = %lld; use a smaller batch or a bigger shard",
                          path, (int)count, dl->dp_size, dl->B, dl->T, (long long)need);
    }
    /* Scan every token: a shard made with a bigger tokenizer than the model's
     * vocabulary would otherwise index past the embedding table. */
    unsigned char* block = (unsigned char*)mallocCheck(2 * (size_t)SHARD_SCAN_BLOCK);
    int rc = 0;
    for (int64_t i = 0; i < count && rc == 0; i += SHARD_SCAN_BLOCK) {
        size_t m = (size_t)(count - i < SHARD_SCAN_BLOCK ? count - i : SHARD_SCAN_BLOCK);
        if (fread(block, 2, m, f) != m) {
            rc = check_errorf(err, errlen, "data error: '%s': read failed at token %lld: %s", path, (long long)i,
                            ferror(f) ? strerror(errno) : "unexpected end of file");
            break;
        }
        for (size_t j = 0; j < m; j++) {
            int tok = block[2 * j] | (block[2 * j + 1] << 8);
            if (tok >= vocab_size) {
                rc = check_errorf(err, errlen, "data error: '%s': token %d at index %lld is >= vocab_size %d "
                                "(the shard was made for a bigger vocabulary than model.vocab_size)",
                                path, tok, (long long)(i + (int64_t)j), vocab_size);
                break;
            }
        }
    }
    free(block);
    fclose(f);
    if (rc == 0) *ntok = count;
    return rc;
}

static int shard_strcmp(const void* a, const void* b) {
    return strcmp(*(char* const*)a, *(char* const*)b);
}

/* ----------------------------------------------------------------------------
 * the loader */

int dataloader_init(DataLoader* dl, const char* pattern, int B, int T, int dp_rank, int dp_size,
                    int vocab_size, char* err, size_t errlen) {
    memset(dl, 0, sizeof(*dl));
    dl->file_shard = -1;
    if (!pattern || !pattern[0]) {
        return check_errorf(err, errlen, "data error: empty data path");
    }
    if (B < 1 || T < 1 || dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size || vocab_size < 1) {
        return check_errorf(err, errlen, "data error: '%s': bad loader arguments B=%d T=%d dp_rank=%d dp_size=%d "
                          "vocab_size=%d", pattern, B, T, dp_rank, dp_size, vocab_size);
    }
    int64_t need = (int64_t)dp_size * B * T + 1;
    if (need - 1 > SHARD_MAX_TOKENS) {
        return check_errorf(err, errlen, "data error: '%s': a global batch of dp_size*B*T = %lld tokens is larger "
                          "than any shard can be", pattern, (long long)(need - 1));
    }
    dl->B = B;
    dl->T = T;
    dl->dp_rank = dp_rank;
    dl->dp_size = dp_size;
    dl->vocab_size = vocab_size;

    glob_t g;
    int grc = glob(pattern, 0, NULL, &g);
    if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
        if (grc == 0) globfree(&g);
        return check_errorf(err, errlen, "data error: no file matches '%s'; make shards with build/prepro "
                          "or fix the data path", pattern);
    }
    if (grc != 0) {
        return check_errorf(err, errlen, "data error: cannot expand '%s' (%s)", pattern,
                          grc == GLOB_NOSPACE ? "out of memory" : "read error");
    }
    if (g.gl_pathc > (size_t)INT32_MAX) {
        globfree(&g);
        return check_errorf(err, errlen, "data error: '%s' matches too many files", pattern);
    }
    /* Sort ourselves with strcmp, not glob's locale-dependent order: every
     * rank must see the same shard sequence. */
    dl->nshards = (int)g.gl_pathc;
    dl->paths = (char**)callocCheck((size_t)dl->nshards, sizeof(char*));
    dl->ntok = (int64_t*)callocCheck((size_t)dl->nshards, sizeof(int64_t));
    for (int i = 0; i < dl->nshards; i++) {
        size_t len = strlen(g.gl_pathv[i]);
        dl->paths[i] = (char*)mallocCheck(len + 1);
        memcpy(dl->paths[i], g.gl_pathv[i], len + 1);
    }
    globfree(&g);
    qsort(dl->paths, (size_t)dl->nshards, sizeof(char*), shard_strcmp);

    for (int i = 0; i < dl->nshards; i++) {
        if (shard_validate(dl->paths[i], vocab_size, need, dl, &dl->ntok[i], err, errlen) != 0) {
            dataloader_free(dl);
            return -1;
        }
        dl->total_tokens += dl->ntok[i];
    }
    dl->buf = (uint16_t*)mallocCheck(((size_t)B * T + 1) * sizeof(uint16_t));
    dl->shard = 0;
    dl->pos = 0;
    return 0;
}

/* Tokens one global batch spans: every rank's B*T plus the last target. */
static int64_t dataloader_window(const DataLoader* dl) {
    return (int64_t)dl->dp_size * dl->B * dl->T + 1;
}

void dataloader_next(DataLoader* dl, int* inputs, int* targets) {
    int64_t BT = (int64_t)dl->B * dl->T;
    if (dl->file_shard != dl->shard) {
        if (dl->file) fcloseCheck(dl->file, dl->paths[dl->file_shard]);
        dl->file = fopenCheck(dl->paths[dl->shard], "rb");
        dl->file_shard = dl->shard;
    }
    off_t offset = (off_t)SHARD_HEADER_BYTES + (off_t)(dl->pos + dl->dp_rank * BT) * 2;
    if (fseeko(dl->file, offset, SEEK_SET) != 0) {
        FATAL("seek to byte %lld of '%s' failed: %s. Did the shard change after the run started?",
              (long long)offset, dl->paths[dl->shard], strerror(errno));
    }
    freadCheck(dl->buf, sizeof(uint16_t), (size_t)BT + 1, dl->file, dl->paths[dl->shard]);
    /* Decode little-endian bytes; on a little-endian host this is a plain copy. */
    const unsigned char* b = (const unsigned char*)dl->buf;
    for (int64_t i = 0; i < BT; i++) {
        inputs[i] = b[2 * i] | (b[2 * i + 1] << 8);
        targets[i] = b[2 * i + 2] | (b[2 * i + 3] << 8);
    }
    /* Advance eagerly, so (shard, pos) always names a window that fits:
     * dataloader_tell then returns a position dataloader_seek accepts. */
    dl->pos += (int64_t)dl->dp_size * BT;
    if (dl->pos + dataloader_window(dl) > dl->ntok[dl->shard]) {
        dl->shard = (dl->shard + 1) % dl->nshards;
        dl->pos = 0;
    }
}

void dataloader_reset(DataLoader* dl) {
    dl->shard = 0;
    dl->pos = 0;
}

DataPos dataloader_tell(const DataLoader* dl) {
    DataPos p;
    p.shard = dl->shard;
    p.pos = dl->pos;
    return p;
}

int dataloader_pos_check(const DataLoader* dl, DataPos p, char* err, size_t errlen) {
    if (p.shard < 0 || p.shard >= dl->nshards) {
        return check_errorf(err, errlen, "data position: shard %lld is out of range (the data has %d shards). Does the "
                            "checkpoint belong to this dataset?", (long long)p.shard, dl->nshards);
    }
    /* p.pos > ntok - window, not p.pos + window > ntok: a hostile pos near
     * INT64_MAX must not overflow the sum */
    if (p.pos < 0 || p.pos > dl->ntok[p.shard] - dataloader_window(dl)) {
        return check_errorf(err, errlen, "data position: token %lld of '%s' is not a valid batch start (the shard has "
                            "%lld tokens, a global batch spans %lld). Does the checkpoint belong to this dataset and "
                            "batch size?", (long long)p.pos, dl->paths[p.shard], (long long)dl->ntok[p.shard],
                            (long long)dataloader_window(dl));
    }
    return 0;
}

void dataloader_seek(DataLoader* dl, DataPos p) {
    char err[1024];
    if (dataloader_pos_check(dl, p, err, sizeof(err)) != 0) FATAL("%s", err);
    dl->shard = p.shard;
    dl->pos = p.pos;
}

int64_t dataloader_num_tokens(const DataLoader* dl) {
    return dl->total_tokens;
}

void dataloader_free(DataLoader* dl) {
    if (dl->file) fclose(dl->file);
    for (int i = 0; i < dl->nshards; i++) free(dl->paths ? dl->paths[i] : NULL);
    free(dl->paths);
    free(dl->ntok);
    free(dl->buf);
    memset(dl, 0, sizeof(*dl));
    dl->file_shard = -1;
}
