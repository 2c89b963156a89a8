/*
 * model/safetensors.h - Hugging Face's safetensors files, read and written
 * here (no library): an 8-byte little-endian header length N, N bytes of
 * JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, optional
 * "__metadata__": {string: string}}, then the tensors' raw little-endian
 * bytes, offsets relative to the end of the header.
 *
 * Reading checks the whole header before any tensor is used: valid JSON, a
 * length inside the file, every entry's dtype/shape/offsets well formed and
 * its byte range inside the data and of the size its shape and dtype need.
 * Tensors convert to fp32 from F32, BF16 and F16; other dtypes are refused
 * when read, naming the tensor. Writing is atomic (path.tmp, fsync, rename)
 * and stores a CRC-32C of the data bytes in the metadata ("tpfp8_crc32c",
 * beside "format": "pt"), which reading verifies when present.
 * Every error is one line naming the file and, where there is one, the tensor.
 */
#ifndef SAFETENSORS_H
#define SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { ST_F32, ST_BF16, ST_F16, ST_UNSUPPORTED };
#define ST_MAX_DIMS 8

typedef struct {
    char* name;
    char dtype[16];             /* as in the file ("F32", "I64", ...) */
    int code;                   /* ST_F32 | ST_BF16 | ST_F16 | ST_UNSUPPORTED */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end;        /* byte range in the data section */
} StTensor;

typedef struct {
    char path[1024];
    FILE* f;
    uint64_t data_off, data_len;   /* where the data section starts, its bytes */
    int n;
    StTensor* t;
    int has_crc;
    uint32_t crc;                  /* "tpfp8_crc32c" of the metadata, when has_crc */
} StFile;

/* Parses and validates a header (json, len bytes, not NUL-terminated) for a
 * data section of data_len bytes into sf (sf->path names the file in
 * messages). 0, or -1 with one line in err; st_close frees either way. */
int st_parse_header(StFile* sf, const char* json, size_t len, uint64_t data_len, char* err, size_t errlen);
/* Opens path and parses its header: 0, or -1 with err (nothing left open). */
int st_open(StFile* sf, const char* path, char* err, size_t errlen);
const StTensor* st_find(const StFile* sf, const char* name);
/* Number of elements of a tensor (its shape's product). */
uint64_t st_numel(const StTensor* t);
/* Reads tensor t as fp32 into dst (st_numel(t) floats): 0, or -1 with err
 * naming the file and the tensor (unsupported dtype, read failure). */
int st_read_f32(StFile* sf, const StTensor* t, float* dst, char* err, size_t errlen);
/* Checks the data section against the stored CRC-32C when there is one
 * (*checked = 1; 0 when the file has none): 0, or -1 with err. */
int st_verify(StFile* sf, int* checked, char* err, size_t errlen);
void st_close(StFile* sf);

/* One tensor to write: its name and shape; its fp32 values come from fill. */
typedef struct {
    char name[128];
    int ndim;
    int64_t shape[2];
} StOut;
typedef void (*st_fill_fn)(void* ctx, int i, float* dst);
/* Writes n tensors in dtype code (ST_F32, ST_BF16 or ST_F16, rounded to
 * nearest even), their fp32 values from fill(ctx, i, buffer), atomically.
 * 0, or -1 with err; a failed write leaves no file. */
int st_write(const char* path, const StOut* ts, int n, int code, st_fill_fn fill, void* ctx, char* err, size_t errlen);

/* fp16 <-> fp32 (IEEE binary16; to half rounds to nearest even) */
float st_f16_to_f32(uint16_t h);
uint16_t st_f32_to_f16(float f);

#ifdef __cplusplus
}
#endif
#endif /* SAFETENSORS_H */
