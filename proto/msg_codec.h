/*
 * Internal to proto/: the message schema (proto/msg_schema.h) as data -- one field descriptor per
 * table entry -- and what the encoder (msg_encode.c), decoder (msg_decode.c), validator
 * (msg_schema.c) and the tests walk it with. Not installed; tests/proto uses it to derive samples
 * and comparisons.
 */
#ifndef GS_PROTO_MSG_CODEC_H
#define GS_PROTO_MSG_CODEC_H

#include "common/error.h"
#include "proto/msg.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gs__fkind {
    GS__F_UINT,
    GS__F_INT,
    GS__F_STR,
    GS__F_BIN,
    GS__F_CHUNK,
    GS__F_TAB,
    GS__F_CSR,
    GS__F_DTAB,
    GS__F_STRS,
    GS__F_BINS,
    GS__F_PEERS
} gs__fkind_t;

/** Why a message is not well-formed (filled by a failing check). */
typedef struct gs__why {
    char text[200];
} gs__why_t;

struct gs__field;
/** A rule beyond the kind's checks: 1 when @a body (the message's gs_msg_<member>_t) satisfies it,
 *  else 0 with @a why set. Runs after the field's own checks passed. */
typedef int (*gs__rule_fn)(const void *body, const struct gs__field *f, gs__why_t *why);
#define GS__NO_RULE ((gs__rule_fn)0)

/** One entry of the schema table. */
typedef struct gs__field {
    const char *name;        /* the struct member's name */
    const char *count_name;  /* the field that sizes it (itself for scalars) */
    gs__fkind_t kind;
    unsigned size;           /* scalar size, or the table's entry width (4 or 8); 0 for the rest */
    unsigned per;            /* entries per count unit */
    unsigned count_size;     /* sizeof the count field (4 or 8) */
    size_t off;              /* offsetof the field in its struct */
    size_t count_off;        /* offsetof the count field */
    gs__rule_fn rule;
} gs__field_t;

typedef struct gs__msg_desc {
    const char *name;        /* for logs; NULL: no such type */
    const gs__field_t *fields;
    unsigned nfields;        /* on the wire: nfields + 1 (the type) */
    uint32_t max_bytes;      /* largest payload (msg_schema.h's cap); 0: the frame limit only */
} gs__msg_desc_t;

/** The descriptor of @a type, NULL when unknown. */
const gs__msg_desc_t *gs__msg_desc(uint32_t type);

/* The rules named in the table (msg_schema.c). */
int gs__rule_peer_role(const void *body, const gs__field_t *f, gs__why_t *why);
int gs__rule_layer_index(const void *body, const gs__field_t *f, gs__why_t *why);
int gs__rule_one_error_per_failure(const void *body, const gs__field_t *f, gs__why_t *why);
int gs__rule_one_per_entry(const void *body, const gs__field_t *f, gs__why_t *why);
int gs__rule_none_or_one_per_key(const void *body, const gs__field_t *f, gs__why_t *why);
int gs__rule_layer_names(const void *body, const gs__field_t *f, gs__why_t *why);

/** Everything a well-formed message satisfies beyond its shape (shared by encoder and decoder). */
int gs__msg_check(const gs_msg_t *m, gs__why_t *why);
int gs__why_set(gs__why_t *why, const char *fmt, ...) GS_PRINTF(2, 3);

/* Field access. Pointer fields are read and written through memcpy: the table stores every pointer
 * kind (const uint64_t *, gs_str_t *, ...) the same way. */
static inline const void *gs__field_at(const void *body, const gs__field_t *f)
{
    return (const uint8_t *)body + f->off;
}

static inline void *gs__field_ptr(const void *body, const gs__field_t *f)
{
    void *p;
    memcpy(&p, gs__field_at(body, f), sizeof p);
    return p;
}

static inline void gs__field_set_ptr(void *body, const gs__field_t *f, const void *p)
{
    memcpy((uint8_t *)body + f->off, &p, sizeof p);
}

static inline uint64_t gs__uint_at(const void *body, size_t off, unsigned size)
{
    uint32_t v32;
    uint64_t v64;
    if (size == 4) {
        memcpy(&v32, (const uint8_t *)body + off, 4);
        return v32;
    }
    memcpy(&v64, (const uint8_t *)body + off, 8);
    return v64;
}

static inline uint64_t gs__field_count(const void *body, const gs__field_t *f)
{
    return gs__uint_at(body, f->count_off, f->count_size);
}

/** The number of dependencies CSR offsets announce (dep_off[ntasks]; 0 when NULL). */
static inline uint64_t gs__csr_ndeps(const void *body, const gs__field_t *csr)
{
    const uint64_t *dep_off = gs__field_ptr(body, csr);
    return dep_off != NULL ? dep_off[gs__field_count(body, csr)] : 0;
}

static inline uint64_t gs__ld_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = n; i-- > 0;) v = (v << 8) | p[i];
    return v;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define GS__BIG_ENDIAN 1
#else
#define GS__BIG_ENDIAN 0
#endif

#ifdef __cplusplus
}
#endif
#endif
