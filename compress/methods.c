/*
 * compress/methods.c - the method table of methods.h as data, and everything
 * that follows from a row: names, parameter validation, the pipeline's
 * switches, the wire layout and sizes (compress_bound included).
 */
#include "compress/methods.h"

#include <string.h>

#include "common/check.h"
#include "compress/hadamard.h"
#include "compress/taco.h"

#define METHOD_ROW(m, nm, h, tb, gb, eb, fam, had, ada, du) [m] = {nm, h, tb, gb, eb, fam, had, ada, du},
static const CompressMethodInfo METHODS[CM_NUM_METHODS] = {COMPRESS_METHOD_TABLE(METHOD_ROW)};

/* The rows must be in CompressMethod order, one per method: METHODS is
 * indexed by the enum, COMPRESS_METHOD_CHOICES lists the rows as written. */
#define METHOD_POSITION(m, ...) METHOD_AT_##m,
enum { COMPRESS_METHOD_TABLE(METHOD_POSITION) METHOD_ROWS };
#define METHOD_IN_ORDER(m, ...) _Static_assert((int)METHOD_AT_##m == (int)m, "methods.h: row " #m " is out of order");
COMPRESS_METHOD_TABLE(METHOD_IN_ORDER)
_Static_assert((int)METHOD_ROWS == (int)CM_NUM_METHODS, "methods.h: one row per CompressMethod");
/* a second scale lives in the header or in the tiles, never both (compress.c reads it at offset 0) */
#define METHOD_ONE_SCALE(m, nm, h, tb, ...) _Static_assert(!((h) > 0 && (tb) > 0), "methods.h: row " #m " has a header and tile scales");
COMPRESS_METHOD_TABLE(METHOD_ONE_SCALE)

const CompressMethodInfo* compress_method_info(CompressMethod m) {
    return ((int)m >= 0 && (int)m < CM_NUM_METHODS) ? &METHODS[m] : NULL;
}

const char* compress_method_name(CompressMethod m) {
    const CompressMethodInfo* r = compress_method_info(m);
    return r ? r->name : "unknown";
}

int compress_method_parse(const char* s, CompressMethod* out) {
    for (int i = 0; i < CM_NUM_METHODS; i++) {
        if (strcmp(s, METHODS[i].name) == 0) {
            *out = (CompressMethod)i;
            return 0;
        }
    }
    return -1;
}

int compress_method_uses_groups(CompressMethod m) {
    const CompressMethodInfo* r = compress_method_info(m);
    return r && r->gbytes > 0;
}

/* ------------------------------------------------------------------------ */
/* parameters */

#define METHOD_SPACE_NAME(m, name, ...) " " name

const char* compress_params_error(const CompressParams* p) {
    if (!compress_method_info(p->method))
        return "unknown compression method (use one of:" COMPRESS_METHOD_TABLE(METHOD_SPACE_NAME) ")";
    if (p->format != FP8_E4M3 && p->format != FP8_E5M2) return "unknown fp8 format (use e4m3 or e5m2)";
    if (compress_method_uses_groups(p->method) &&
        (p->group_size < 16 || p->group_size > TACO_GROUP_MAX || !hadamard_is_pow2(p->group_size)))
        return "group_size must be a power of two from 16 to 256";
    return NULL;
}

void compress_params_check(const CompressParams* p, const char* who) {
    const char* err = compress_params_error(p);
    if (err) FATAL("%s: invalid compression parameters (method %d, group_size %d): %s", who, (int)p->method,
                   p->group_size, err);
}

static int switch_of(int row, int user) { return row == CM_SW_USER ? user != 0 : row; }

CompressSwitches compress_method_switches(const CompressParams* p) {
    const CompressMethodInfo* r = &METHODS[p->method];
    CompressSwitches s;
    s.hadamard = switch_of(r->hadamard, p->hadamard);
    s.adaptive = switch_of(r->adaptive, p->adaptive_scale);
    s.dual = switch_of(r->dual, p->dual_scale);
    return s;
}

/* a delayed amax predicts the chunk scale: without one on the wire there is nothing to predict */
float compress_method_delayed_amax(const CompressParams* p) {
    const CompressMethodInfo* r = &METHODS[p->method];
    return ((r->hdr > 0 || r->tbytes > 0) && p->delayed) ? p->delayed_amax : 0.0f;
}

int compress_sum_stays_rotated(const CompressParams* p_in, const CompressParams* p_out) {
    compress_params_check(p_in, "compress_sum_stays_rotated");
    compress_params_check(p_out, "compress_sum_stays_rotated");
    if (METHODS[p_in->method].family != CM_FAM_FP8 || METHODS[p_out->method].family != CM_FAM_FP8) return 0;
    /* the Hadamard runs on groups of the wire only (fp8_tensor's blocks have no byte, and no rotation) */
    if (!compress_method_uses_groups(p_in->method) || !compress_method_uses_groups(p_out->method)) return 0;
    return compress_method_switches(p_in).hadamard && compress_method_switches(p_out).hadamard &&
           p_in->group_size == p_out->group_size && p_in->format == p_out->format;
}

CompressParams compress_recompress_params(const CompressParams* p_in, const CompressParams* p_out) {
    CompressParams r = *p_out;
    if (!compress_sum_stays_rotated(p_in, p_out)) return r;
    r.hadamard = 0;
    /* a row that fixed the Hadamard on could not be switched off here */
    if (compress_method_switches(&r).hadamard) FATAL("methods.h: row %s fixes the Hadamard on", METHODS[r.method].name);
    return r;
}

/* ------------------------------------------------------------------------ */
/* the wire */

CompressWireLayout compress_wire_layout(const CompressParams* p) {
    compress_params_check(p, "compress_wire_layout");
    const CompressMethodInfo* r = &METHODS[p->method];
    CompressWireLayout l;
    l.hdr = r->hdr;
    l.tbytes = r->tbytes;
    l.T = COMPRESS_WIRE_TILE;
    l.gbytes = r->gbytes;
    l.ebytes = r->ebytes;
    l.G = r->gbytes ? p->group_size : COMPRESS_WIRE_UNIT;
    l.gran = l.G > COMPRESS_WIRE_UNIT ? l.G : COMPRESS_WIRE_UNIT;
    if (l.tbytes) l.gran = l.T; /* a range holds whole tiles: their scales are its own */
    return l;
}

size_t compress_wire_tiles(const CompressWireLayout* l, size_t e0, size_t e1) {
    return l->tbytes ? (e1 + (size_t)l->T - 1) / (size_t)l->T - e0 / (size_t)l->T : 0;
}
size_t compress_wire_groups(const CompressWireLayout* l, size_t e0, size_t e1) {
    return (e1 + (size_t)l->G - 1) / (size_t)l->G - e0 / (size_t)l->G;
}

size_t compress_wire_range_bytes(const CompressParams* p, size_t n, size_t e0, size_t e1) {
    const CompressWireLayout l = compress_wire_layout(p);
    if (e0 > e1 || e1 > n) FATAL("compress_wire_range_bytes: range [%zu, %zu) outside a chunk of %zu", e0, e1, n);
    return (e0 == 0 ? (size_t)l.hdr : 0) + (size_t)l.tbytes * compress_wire_tiles(&l, e0, e1) +
           (size_t)l.gbytes * compress_wire_groups(&l, e0, e1) + (size_t)l.ebytes * (e1 - e0);
}

size_t compress_wire_groups_offset(const CompressWireLayout* l, size_t n) {
    return (size_t)l->hdr + (size_t)l->tbytes * compress_wire_tiles(l, 0, n);
}
size_t compress_wire_codes_offset(const CompressWireLayout* l, size_t n) {
    return compress_wire_groups_offset(l, n) + (size_t)l->gbytes * compress_wire_groups(l, 0, n);
}

size_t compress_bound(const CompressParams* p, size_t n) {
    compress_params_check(p, "compress_bound");
    return compress_wire_range_bytes(p, n, 0, n);
}
