/*
 * data/tokenizer.h - token ids -> text, for printing samples during training.
 *
 * Only decoding: the trainer reads pre-tokenised shards, so it never needs to
 * encode. Three kinds, chosen by tokenizer_init:
 *   - vocab_size 256: byte-level (what build/prepro writes): token = byte.
 *   - a file in llm.c's gpt2_tokenizer.bin format: header of 256 uint32
 *     ([0] = 20240328 magic, [1] = version 1 or 2, [2] = vocab size,
 *     [3] = end-of-text token in version 2), then per token one uint8 length
 *     and that many bytes.
 *   - otherwise ids print as "<id>", so samples are still visible.
 */
#ifndef TOKENIZER_H
#define TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TOKENIZER_MAGIC 20240328

enum { TOKENIZER_BYTES = 0, TOKENIZER_TABLE = 1, TOKENIZER_IDS = 2 };

typedef struct {
    int kind;            /* TOKENIZER_BYTES / _TABLE / _IDS */
    int vocab_size;
    int eot_token;       /* end-of-text id from the file, or -1 */
    uint32_t* offsets;   /* TABLE: token i is blob[offsets[i] .. offsets[i+1]) */
    unsigned char* blob; /* TABLE: all token bytes back to back */
} Tokenizer;

/* vocab_size 256 -> bytes (path ignored); else path (non-NULL, non-empty) ->
 * load it, its vocab size must equal vocab_size; else "<id>". Returns 0, or -1
 * with a one-line message in err naming the file. */
int tokenizer_init(Tokenizer* t, int vocab_size, const char* path_or_null, char* err, size_t errlen);
/* Write the text of n tokens to out. Control bytes other than '\n' print as
 * '.', so a sample cannot move the cursor or change the terminal's state;
 * ids outside the vocabulary print as "<id>". */
void tokenizer_print(const Tokenizer* t, const int* tokens, int n, FILE* out);
void tokenizer_free(Tokenizer* t);

#ifdef __cplusplus
}
#endif
#endif /* TOKENIZER_H */
