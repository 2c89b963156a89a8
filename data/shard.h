/*
 * data/shard.h - token shards (llm.c's .bin format) and the data loader.
 *
 * A shard is a file of training tokens, byte-compatible with llm.c:
 *   header: 256 little-endian int32 (1024 bytes):
 *           [0] = 20240520 (magic), [1] = 1 (version), [2] = number of tokens,
 *           the rest zero
 *   body:   that many little-endian uint16 tokens
 * So shards written by llm.c's dev/data scripts (GPT-2 tokens) load unchanged,
 * and build/prepro writes byte-level shards (vocab 256) in the same format.
 *
 * The loader walks a sorted list of shards (one path or a glob) in order, one
 * global batch at a time. A global batch is a window of dp_size*B*T+1 tokens:
 * DP rank r reads the B*T+1 tokens starting at pos + r*B*T, so its inputs are
 * tokens [0, B*T) of its slice and its targets tokens [1, B*T+1) (the next
 * token). Consecutive ranks share one boundary token, exactly like llm.c.
 * After a batch pos += dp_size*B*T; when the next window would not fit in the
 * shard, the loader moves to the next shard at position 0, and after the last
 * shard wraps around to the first. All TP ranks of one DP group pass the same
 * dp_rank, so they read the same batch.
 *
 * Every shard is validated completely at init (header, size, every token <
 * vocab_size), so a bad file fails before any training work with a message
 * naming it; batches are then read with fseek/fread, never the whole file,
 * because real shards are hundreds of MB each.
 */
#ifndef SHARD_H
#define SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define SHARD_MAX_TOKENS 2147483647LL /* the header's count is an int32 */

/* Write n tokens to path as one shard. Writes path.tmp and renames it over
 * path, so a crash never leaves a half-written shard under the real name.
 * Returns 0, or -1 with a one-line message in err. */
int shard_write(const char* path, const uint16_t* tokens, size_t n, char* err, size_t errlen);

typedef struct {
    int B, T, dp_rank, dp_size, vocab_size;
    int nshards;
    char** paths;         /* sorted shard paths */
    int64_t* ntok;        /* tokens in each shard */
    int64_t total_tokens; /* sum of ntok */
    int64_t shard, pos;   /* start of the NEXT global batch: shard index, token offset */
    FILE* file;           /* open handle on paths[file_shard], or NULL */
    int64_t file_shard;
    uint16_t* buf;        /* B*T+1 tokens: this rank's slice of one global batch */
} DataLoader;

/* pattern: a path or a glob (its matches are sorted). Every token must be
 * < vocab_size. Returns 0, or -1 with a one-line message in err naming the
 * file (or the pattern when nothing matches); on error nothing stays
 * allocated and dataloader_free(dl) is a harmless no-op. */
int dataloader_init(DataLoader* dl, const char* pattern, int B, int T, int dp_rank, int dp_size,
                    int vocab_size, char* err, size_t errlen);
/* Fill B*T inputs and B*T targets (targets = inputs shifted by one token). */
void dataloader_next(DataLoader* dl, int* inputs, int* targets);
/* Back to shard 0, position 0. */
void dataloader_reset(DataLoader* dl);

/* Where the next batch starts; stored in checkpoints so a resumed run reads
 * exactly the batches it would have read. */
typedef struct {
    int64_t shard;
    int64_t pos;
} DataPos;
DataPos dataloader_tell(const DataLoader* dl);
/* FATAL if p is not a valid batch start for this loader (shard out of range,
 * or the window would not fit in the shard). */
void dataloader_seek(DataLoader* dl, DataPos p);
/* 0 if p is a valid batch start for this loader, else -1 with one line in err
 * (what dataloader_seek would end the run with). */
int dataloader_pos_check(const DataLoader* dl, DataPos p, char* err, size_t errlen);
/* Tokens over all shards. */
int64_t dataloader_num_tokens(const DataLoader* dl);
void dataloader_free(DataLoader* dl);

#ifdef __cplusplus
}
#endif
#endif /* SHARD_H */
