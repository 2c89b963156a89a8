/*
 * common/crc32c.h - CRC-32C (Castagnoli), the checksum of checkpoint and
 * state files.
 *
 * CRC-32C rather than a plain CRC-32 because x86 has an instruction for it
 * (SSE4.2), so checking a GPT-2-sized model file costs well under a second,
 * and it catches every burst error up to 32 bits, which is what a flipped or
 * overwritten word in a file looks like. It is not a cryptographic hash: it
 * finds accidents (bad disks, partial copies, stray writes), not attacks.
 *
 * Incremental: crc = crc32c_update(0, a, na); crc = crc32c_update(crc, b, nb)
 * equals crc32c_update(0, ab, na + nb), so files are checksummed while they
 * are streamed, never held twice.
 */
#ifndef CRC32C_H
#define CRC32C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

uint32_t crc32c_update(uint32_t crc, const void* data, size_t n);
/* the same value by the portable table path alone (what hosts without
 * SSE4.2 run): tests compare the two */
uint32_t crc32c_update_portable(uint32_t crc, const void* data, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* CRC32C_H */
