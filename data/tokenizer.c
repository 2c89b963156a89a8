/*
 * data/tokenizer.c - decoding token ids for printed samples (see tokenizer.h).
 *
 * A bad tokenizer file is user input, so loading it returns an error message
 * instead of ending the run; the trainer decides how to report it.
 */
#include "data/tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

static uint32_t tokenizer_le32(const unsigned char* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Read llm.c's gpt2_tokenizer.bin. The whole table is small (~0.4 MB for
 * GPT-2), so it is read into one blob plus an offset per token. */
static int tokenizer_load(Tokenizer* t, int vocab_size, const char* path, char* err, size_t errlen) {
    FILE* f = fopen(path, "rb");
    if (!f) {
        return check_errorf(err, errlen, "tokenizer error: cannot open '%s': %s", path, strerror(errno));
    }
    unsigned char hdr[256 * 4];
    if (fread(hdr, 1, sizeof(hdr), f) != sizeof(hdr)) {
        fclose(f);
        return check_errorf(err, errlen, "tokenizer error: '%s' is too short for the 1024-byte header", path);
    }
    uint32_t magic = tokenizer_le32(hdr), version = tokenizer_le32(hdr + 4), n = tokenizer_le32(hdr + 8);
    if (magic != TOKENIZER_MAGIC) {
        fclose(f);
        return check_errorf(err, errlen, "tokenizer error: '%s': bad magic %u (expected %d): not an llm.c "
                              "tokenizer file", path, magic, TOKENIZER_MAGIC);
    }
    if (version != 1 && version != 2) {
        fclose(f);
        return check_errorf(err, errlen, "tokenizer error: '%s': unsupported version %u (expected 1 or 2)",
                              path, version);
    }
    if (n != (uint32_t)vocab_size) {
        fclose(f);
        return check_errorf(err, errlen, "tokenizer error: '%s' has %u tokens but model.vocab_size is %d; "
                              "use the tokenizer the shards were made with", path, n, vocab_size);
    }
    /* Version 1 files predate the field; llm.c hard-codes GPT-2's 50256 then. */
    t->eot_token = version == 2 ? (int)tokenizer_le32(hdr + 12) : (n == 50257 ? 50256 : -1);
    t->offsets = (uint32_t*)mallocCheck(((size_t)n + 1) * sizeof(uint32_t));
    t->blob = (unsigned char*)mallocCheck((size_t)n * 255 + 1); /* lengths are uint8 */
    uint32_t used = 0;
    for (uint32_t i = 0; i < n; i++) {
        unsigned char len;
        if (fread(&len, 1, 1, f) != 1 || fread(t->blob + used, 1, len, f) != len) {
            fclose(f);
            free(t->offsets);
            free(t->blob);
            t->offsets = NULL;
            t->blob = NULL;
            return check_errorf(err, errlen, "tokenizer error: '%s' is truncated at token %u of %u", path, i, n);
        }
        t->offsets[i] = used;
        used += len;
    }
    t->offsets[n] = used;
    fclose(f);
    unsigned char* shrunk = (unsigned char*)realloc(t->blob, (size_t)used + 1);
    if (shrunk) t->blob = shrunk; /* a failed shrink keeps the bigger block */
    return 0;
}

int tokenizer_init(Tokenizer* t, int vocab_size, const char* path_or_null, char* err, size_t errlen) {
    memset(t, 0, sizeof(*t));
    t->eot_token = -1;
    t->vocab_size = vocab_size;
    if (vocab_size < 1) {
        return check_errorf(err, errlen, "tokenizer error: vocab_size %d must be >= 1", vocab_size);
    }
    if (vocab_size == 256) {
        t->kind = TOKENIZER_BYTES;
        return 0;
    }
    if (path_or_null && path_or_null[0]) {
        t->kind = TOKENIZER_TABLE;
        return tokenizer_load(t, vocab_size, path_or_null, err, errlen);
    }
    t->kind = TOKENIZER_IDS;
    return 0;
}

/* Bytes go out one by one: bytes >= 0x80 unchanged, so UTF-8 text reads
 * right (a sample cut mid-character shows a replacement glyph at worst). */
static void tokenizer_put_bytes(const unsigned char* s, size_t n, FILE* out) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        int control = (c < 0x20 && c != '\n') || c == 0x7f;
        fputc(control ? '.' : c, out);
    }
}

void tokenizer_print(const Tokenizer* t, const int* tokens, int n, FILE* out) {
    for (int i = 0; i < n; i++) {
        int id = tokens[i];
        if (id < 0 || id >= t->vocab_size || t->kind == TOKENIZER_IDS) {
            fprintf(out, "<%d>", id);
        } else if (t->kind == TOKENIZER_BYTES) {
            unsigned char c = (unsigned char)id;
            tokenizer_put_bytes(&c, 1, out);
        } else {
            tokenizer_put_bytes(t->blob + t->offsets[id], t->offsets[id + 1] - t->offsets[id], out);
        }
    }
}

void tokenizer_free(Tokenizer* t) {
    free(t->offsets);
    free(t->blob);
    memset(t, 0, sizeof(*t));
    t->eot_token = -1;
}
