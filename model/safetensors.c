/*
 * model/safetensors.c - the safetensors reader and writer (safetensors.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "common/check.h"
#include "common/crc32c.h"

#define ST_MAX_HEADER (100u << 20) /* the format's own limit on the header: 100 MB */
#define ST_CRC_KEY "tpfp8_crc32c"

float st_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, b;
    if (e == 0x1f) b = s | 0x7f800000u | (m << 13);            /* inf, nan */
    else if (e != 0) b = s | ((e + 112) << 23) | (m << 13);   /* normal: rebias 15 -> 127 */
    else if (m == 0) b = s;                                   /* zero */
    else {                                                    /* subnormal: m * 2^-24, exact in fp32 */
        float v = (float)m * 5.9604644775390625e-8f;
        memcpy(&b, &v, 4);
        b |= s;
    }
    float f;
    memcpy(&f, &b, 4);
    return f;
}

uint16_t st_f32_to_f16(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    uint16_t s = (uint16_t)((b >> 16) & 0x8000);
    float a = fabsf(f);
    if (isnan(f)) return s | 0x7e00;
    if (a >= 65520.0f) return s | 0x7c00;                   /* rounds to inf */
    if (a < 6.103515625e-05f) {                             /* subnormal half: a multiple of 2^-24 */
        float q = rintf(a * 16777216.0f);                   /* rintf: ties to even */
        return s | (uint16_t)q;
    }
    uint32_t ab = b & 0x7fffffffu;
    uint32_t mant = ab & 0x7fffff, exp = (ab >> 23) - 112;  /* half exponent */
    uint32_t h = (exp << 10) | (mant >> 13), rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;  /* nearest even; a carry moves into the exponent */
    return s | (uint16_t)h;
}

static int dtype_code(const char* d, size_t* size) {
    static const struct { const char* name; int code; size_t size; } T[] = {
        {"F32", ST_F32, 4}, {"BF16", ST_BF16, 2}, {"F16", ST_F16, 2}, {"F64", ST_UNSUPPORTED, 8},
        {"I64", ST_UNSUPPORTED, 8}, {"U64", ST_UNSUPPORTED, 8}, {"I32", ST_UNSUPPORTED, 4}, {"U32", ST_UNSUPPORTED, 4},
        {"I16", ST_UNSUPPORTED, 2}, {"U16", ST_UNSUPPORTED, 2}, {"I8", ST_UNSUPPORTED, 1}, {"U8", ST_UNSUPPORTED, 1},
        {"BOOL", ST_UNSUPPORTED, 1}, {"F8_E4M3", ST_UNSUPPORTED, 1}, {"F8_E5M2", ST_UNSUPPORTED, 1}};
    for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++)
        if (strcmp(d, T[i].name) == 0) { *size = T[i].size; return T[i].code; }
    return -1;
}

uint64_t st_numel(const StTensor* t) {
    uint64_t n = 1;
    for (int k = 0; k < t->ndim; k++) n *= (uint64_t)t->shape[k];
    return n;
}

/* one header entry into t; 0 or -1 with err naming the tensor */
static int parse_entry(const StFile* sf, const cJSON* e, StTensor* t, uint64_t data_len, char* err, size_t errlen) {
    const char* nm = e->string;
    const cJSON* dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON* sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON* of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2)
        return check_errorf(err, errlen, "%s: tensor %s: its header entry needs \"dtype\" (a string), \"shape\" (an "
                            "array) and \"data_offsets\" ([begin, end]): malformed header", sf->path, nm);
    size_t esize = 0;
    t->code = dtype_code(dt->valuestring, &esize);
    if (t->code < 0)
        return check_errorf(err, errlen, "%s: tensor %s has unknown dtype \"%.15s\": malformed header", sf->path, nm,
                            dt->valuestring);
    snprintf(t->dtype, sizeof(t->dtype), "%s", dt->valuestring);
    t->ndim = cJSON_GetArraySize(sh);
    if (t->ndim > ST_MAX_DIMS) return check_errorf(err, errlen, "%s: tensor %s has %d dimensions (at most %d)", sf->path, nm, t->ndim, ST_MAX_DIMS);
    uint64_t bytes = esize;
    for (int k = 0; k < t->ndim; k++) {
        const cJSON* d = cJSON_GetArrayItem(sh, k);
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 9e15 || d->valuedouble != floor(d->valuedouble))
            return check_errorf(err, errlen, "%s: tensor %s: shape entry %d is not a non-negative integer", sf->path, nm, k);
        t->shape[k] = (int64_t)d->valuedouble;
        if (__builtin_mul_overflow(bytes, (uint64_t)t->shape[k], &bytes))
            return check_errorf(err, errlen, "%s: tensor %s: its shape overflows 64 bits", sf->path, nm);
    }
    double ob[2];
    for (int k = 0; k < 2; k++) {
        const cJSON* o = cJSON_GetArrayItem(of, k);
        ob[k] = cJSON_IsNumber(o) ? o->valuedouble : -1.0;
        if (ob[k] < 0 || ob[k] > 9e15 || ob[k] != floor(ob[k]))
            return check_errorf(err, errlen, "%s: tensor %s: data_offsets must be two non-negative integers", sf->path, nm);
    }
    t->begin = (uint64_t)ob[0];
    t->end = (uint64_t)ob[1];
    if (t->end < t->begin || t->end - t->begin != bytes)
        return check_errorf(err, errlen, "%s: tensor %s: data_offsets [%llu, %llu] hold %llu bytes but dtype %s and its "
                            "shape need %llu: corrupt header", sf->path, nm, (unsigned long long)t->begin,
                            (unsigned long long)t->end, (unsigned long long)(t->end - t->begin), t->dtype,
                            (unsigned long long)bytes);
    if (t->end > data_len)
        return check_errorf(err, errlen, "%s: tensor %s needs data bytes [%llu, %llu) but the file has only %llu after "
                            "its header: truncated", sf->path, nm, (unsigned long long)t->begin,
                            (unsigned long long)t->end, (unsigned long long)data_len);
    return 0;
}

static int parse_metadata(StFile* sf, const cJSON* md, char* err, size_t errlen) {
    if (!cJSON_IsObject(md)) return check_errorf(err, errlen, "%s: \"__metadata__\" is not an object: malformed header", sf->path);
    const cJSON* crc = cJSON_GetObjectItemCaseSensitive(md, ST_CRC_KEY);
    if (!crc) return 0;
    char* end = NULL;
    unsigned long v = cJSON_IsString(crc) ? strtoul(crc->valuestring, &end, 16) : 0;
    if (!end || end == crc->valuestring || *end || v > 0xffffffffUL)
        return check_errorf(err, errlen, "%s: metadata %s is not 8 hex digits: corrupt header", sf->path, ST_CRC_KEY);
    sf->has_crc = 1;
    sf->crc = (uint32_t)v;
    return 0;
}

int st_parse_header(StFile* sf, const char* json, size_t len, uint64_t data_len, char* err, size_t errlen) {
    sf->n = 0;
    sf->t = NULL;
    sf->has_crc = 0;
    sf->data_len = data_len;
    cJSON* root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return check_errorf(err, errlen, "%s: the safetensors header (%zu bytes of JSON after the 8-byte length) is "
                            "not a JSON object: malformed header, not a safetensors file?", sf->path, len);
    }
    int n = cJSON_GetArraySize(root), rc = 0;
    sf->t = callocCheck((size_t)(n > 0 ? n : 1), sizeof(StTensor));
    for (const cJSON* e = root->child; e && rc == 0; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) { rc = parse_metadata(sf, e, err, errlen); continue; }
        StTensor* t = &sf->t[sf->n];
        t->name = strdup(e->string);
        if (!t->name) FATAL("out of host memory reading %s", sf->path);
        sf->n++;
        rc = parse_entry(sf, e, t, data_len, err, errlen);
    }
    cJSON_Delete(root);
    return rc;
}

int st_open(StFile* sf, const char* path, char* err, size_t errlen) {
    memset(sf, 0, sizeof(*sf));
    snprintf(sf->path, sizeof(sf->path), "%s", path);
    FILE* f = fopen(path, "rb");
    if (!f) return check_errorf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    unsigned char lb[8];
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    int ok = size >= 0 && fseek(f, 0, SEEK_SET) == 0 && fread(lb, 1, 8, f) == 8;
    if (!ok) {
        fclose(f);
        return check_errorf(err, errlen, "%s is %ld bytes, too short for a safetensors file (8-byte header length)", path, size);
    }
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = hlen << 8 | lb[k];
    if (hlen > (uint64_t)size - 8 || hlen > ST_MAX_HEADER) {
        fclose(f);
        return check_errorf(err, errlen, "%s: the header length %llu runs past the end of the file (%ld bytes): "
                            "truncated or not a safetensors file", path, (unsigned long long)hlen, size);
    }
    char* json = mallocCheck((size_t)hlen + 1);
    if (fread(json, 1, (size_t)hlen, f) != (size_t)hlen) {
        free(json);
        fclose(f);
        return check_errorf(err, errlen, "reading the header of %s failed: %s", path, strerror(errno));
    }
    sf->f = f;
    sf->data_off = 8 + hlen;
    int rc = st_parse_header(sf, json, (size_t)hlen, (uint64_t)size - 8 - hlen, err, errlen);
    free(json);
    if (rc != 0) st_close(sf);
    return rc;
}

const StTensor* st_find(const StFile* sf, const char* name) {
    for (int i = 0; i < sf->n; i++) if (strcmp(sf->t[i].name, name) == 0) return &sf->t[i];
    return NULL;
}

int st_read_f32(StFile* sf, const StTensor* t, float* dst, char* err, size_t errlen) {
    if (t->code == ST_UNSUPPORTED)
        return check_errorf(err, errlen, "%s: tensor %s has dtype %s; only F32, BF16 and F16 load (convert it, e.g. "
                            "save_pretrained with torch_dtype=torch.float32)", sf->path, t->name, t->dtype);
    uint64_t n = st_numel(t), bytes = t->end - t->begin;
    void* raw = t->code == ST_F32 ? (void*)dst : mallocCheck(bytes ? (size_t)bytes : 1);
    int ok = fseeko(sf->f, (off_t)(sf->data_off + t->begin), SEEK_SET) == 0 && fread(raw, 1, (size_t)bytes, sf->f) == bytes;
    if (ok && t->code != ST_F32) {
        const uint16_t* h = raw;
        for (uint64_t i = 0; i < n; i++) dst[i] = t->code == ST_BF16 ? bf16_to_f32(h[i]) : st_f16_to_f32(h[i]);
    }
    if (raw != dst) free(raw);
    if (!ok) return check_errorf(err, errlen, "%s: reading tensor %s failed (the file changed while being read?)", sf->path, t->name);
    return 0;
}

int st_verify(StFile* sf, int* checked, char* err, size_t errlen) {
    *checked = 0;
    if (!sf->has_crc) return 0;
    uint32_t crc = 0;
    unsigned char buf[1 << 16];
    uint64_t left = sf->data_len;
    int ok = fseeko(sf->f, (off_t)sf->data_off, SEEK_SET) == 0;
    while (ok && left > 0) {
        size_t k = left < sizeof(buf) ? (size_t)left : sizeof(buf);
        ok = fread(buf, 1, k, sf->f) == k;
        if (ok) crc = crc32c_update(crc, buf, k);
        left -= k;
    }
    if (!ok) return check_errorf(err, errlen, "%s: reading its data for the checksum failed", sf->path);
    if (crc != sf->crc)
        return check_errorf(err, errlen, "%s fails its checksum (stored CRC-32C %08x, computed %08x): the file is corrupt",
                            sf->path, sf->crc, crc);
    *checked = 1;
    return 0;
}

void st_close(StFile* sf) {
    if (sf->f) fclose(sf->f);
    for (int i = 0; i < sf->n; i++) free(sf->t[i].name);
    free(sf->t);
    sf->f = NULL;
    sf->t = NULL;
    sf->n = 0;
}

/* ---- writer ---------------------------------------------------------------- */

int st_write(const char* path, const StOut* ts, int n, int code, st_fill_fn fill, void* ctx, char* err, size_t errlen) {
    const char* dname = code == ST_F32 ? "F32" : code == ST_BF16 ? "BF16" : "F16";
    size_t esize = code == ST_F32 ? 4 : 2;
    cJSON* root = cJSON_CreateObject();
    cJSON* md = cJSON_AddObjectToObject(root, "__metadata__");
    if (!root || !md || !cJSON_AddStringToObject(md, "format", "pt") || !cJSON_AddStringToObject(md, ST_CRC_KEY, "00000000"))
        FATAL("out of host memory writing %s", path);
    uint64_t off = 0, maxn = 1;
    for (int i = 0; i < n; i++) {
        uint64_t numel = 1;
        cJSON* e = cJSON_AddObjectToObject(root, ts[i].name);
        cJSON* sh = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON* of = e ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        if (!sh || !of || !cJSON_AddStringToObject(e, "dtype", dname)) FATAL("out of host memory writing %s", path);
        for (int k = 0; k < ts[i].ndim; k++) {
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)ts[i].shape[k]));
            numel *= (uint64_t)ts[i].shape[k];
        }
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        off += numel * esize;
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        if (numel > maxn) maxn = numel;
    }
    char* json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!json) FATAL("out of host memory writing %s", path);
    size_t jlen = strlen(json), padded = (jlen + 7) / 8 * 8;   /* the data starts 8-byte aligned, as safetensors' own writer */
    /* The CRC covers the data, written after the header: the header carries 8
     * zero digits for it, overwritten once the data is out. */
    const char* crcat = strstr(json, "\"" ST_CRC_KEY "\":\"00000000\"");
    if (!crcat) FATAL("st_write: the header of %s lost its %s field (cJSON printed it differently)", path, ST_CRC_KEY);
    const size_t crcpos = (size_t)(crcat - json) + strlen(ST_CRC_KEY) + 4; /* past "KEY":" */
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* f = fopenErr(tmp, "wb", err, errlen);
    if (!f) { free(json); return -1; }
    unsigned char lb[8];
    for (int k = 0; k < 8; k++) lb[k] = (unsigned char)((uint64_t)padded >> (8 * k));
    int rc = fwriteErr(lb, 1, 8, f, tmp, err, errlen);
    if (rc == 0) rc = fwriteErr(json, 1, jlen, f, tmp, err, errlen);
    for (size_t k = jlen; rc == 0 && k < padded; k++) rc = fwriteErr(" ", 1, 1, f, tmp, err, errlen);
    float* buf = mallocCheck((size_t)maxn * sizeof(float));
    uint16_t* half = code == ST_F32 ? NULL : mallocCheck((size_t)maxn * sizeof(uint16_t));
    uint32_t crc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        size_t numel = 1;
        for (int k = 0; k < ts[i].ndim; k++) numel *= (size_t)ts[i].shape[k];
        fill(ctx, i, buf);
        const void* out = buf;
        if (half) {
            for (size_t j = 0; j < numel; j++) half[j] = code == ST_BF16 ? bf16_from_f32(buf[j]) : st_f32_to_f16(buf[j]);
            out = half;
        }
        crc = crc32c_update(crc, out, numel * esize);
        rc = fwriteErr(out, esize, numel, f, tmp, err, errlen);
    }
    free(buf);
    free(half);
    if (rc == 0) { /* the data's CRC over the 8 digits the header holds for it */
        char hex[9];
        snprintf(hex, sizeof(hex), "%08x", crc);
        if (fseek(f, (long)(8 + crcpos), SEEK_SET) != 0) rc = check_errorf(err, errlen, "cannot seek in %s: %s", tmp, strerror(errno));
        if (rc == 0) rc = fwriteErr(hex, 1, 8, f, tmp, err, errlen);
    }
    free(json);
    if (rc == 0) rc = fcloseErr(f, tmp, err, errlen);   /* flushes and fsyncs */
    else fclose(f);
    if (rc == 0 && rename(tmp, path) != 0) rc = check_errorf(err, errlen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc != 0) remove(tmp);
    return rc;
}
