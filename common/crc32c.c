/*
 * common/crc32c.c - CRC-32C, see crc32c.h.
 *
 * Two paths that give the same bits: the SSE4.2 crc32 instruction when the
 * compiler targets it (-march=native on any x86 of the last 15 years), else
 * a byte-at-a-time table. The table path is the reference: tests/test_params
 * checks both against the published check value and each other.
 */
#include "common/crc32c.h"

#include <string.h>

#if defined(__SSE4_2__) && defined(__x86_64__)
#include <nmmintrin.h>
#define CRC32C_HW 1
#endif

#define CRC32C_POLY 0x82F63B78u /* the Castagnoli polynomial, bit-reversed */

static uint32_t crc32c_table_update(uint32_t crc, const unsigned char* p, size_t n) {
    static uint32_t table[256];
    static int ready = 0;
    if (!ready) {   /* idempotent: a race between threads writes the same values */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return crc;
}

uint32_t crc32c_update(uint32_t crc, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    crc = ~crc;   /* pre- and post-inversion, as the standard defines it */
#ifdef CRC32C_HW
    uint64_t c = crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);   /* unaligned-safe; compiles to one load */
        c = _mm_crc32_u64(c, w);
    }
    crc = (uint32_t)c;
#endif
    crc = crc32c_table_update(crc, p, n);
    return ~crc;
}

uint32_t crc32c_update_portable(uint32_t crc, const void* data, size_t n) {
    return ~crc32c_table_update(~crc, (const unsigned char*)data, n);
}
