/* What a generator of messages must know about the schema table (proto/msg_schema.h) beyond the
 * field kinds: which fields size others, and what the table's rules require of an array's
 * count. Shared by tests/proto's samples and tests/fuzz/sockfuzz's random messages; a new rule
 * needs a line here (and in the generators' value rules). */
#ifndef GS_TESTS_PROTO_SCHEMA_RULES_H
#define GS_TESTS_PROTO_SCHEMA_RULES_H

#include "proto/msg_codec.h"

/** 1 when @a f sizes another field of @a d. */
static inline int schema_is_count(const gs__msg_desc_t *d, const gs__field_t *f)
{
    for (unsigned i = 0; i < d->nfields; i++) {
        if (&d->fields[i] != f && d->fields[i].count_off == f->off) return 1;
    }
    return 0;
}

/** The count the table's rule requires of the array field @a f of @a body (the fields before
 *  it filled in), else @a dflt. */
static inline uint64_t schema_rule_count(const void *body, const gs__field_t *f, uint64_t dflt)
{
    if (f->rule == gs__rule_one_per_entry) return gs__uint_at(body, 0, 4);
    if (f->rule == gs__rule_layer_names) return ((const gs_msg_graph_submit_t *)body)->nlayers;
    if (f->rule == gs__rule_one_error_per_failure) {
        const gs_msg_task_done_t *t = body;
        uint64_t failed = 0;
        for (uint64_t i = 0; i < t->n; i++) failed += t->status[i] != GS_OK;
        return failed;
    }
    return dflt;
}

/** How a generator draws the elements of an array field (STRS, BINS, PEERS); @a ctx is passed
 *  to every call. elem(ctx, f, role, k) returns element k of field f: its string (role "str")
 *  or binary ("bin"), or a peer's "name", "host" or "ucx"; id(ctx) a peer's id; alloc(ctx, n)
 *  n bytes that stay valid as long as the message (NULL: no room). */
typedef struct schema_gen {
    gs_bytes_t (*elem)(void *ctx, const gs__field_t *f, const char *role, uint32_t k);
    uint64_t (*id)(void *ctx);
    void *(*alloc)(void *ctx, size_t n);
    void *ctx;
} schema_gen_t;

/** Fill the array field @a f of @a body with @a n elements (the rule's count when it has one)
 *  and set its count; returns the array (NULL and count 0 when @a n is 0 or there is no room). */
static inline void *schema_fill_array(void *body, const gs__field_t *f, uint32_t n, const schema_gen_t *g)
{
    size_t esize = f->kind == GS__F_PEERS ? sizeof(gs_peer_info_t) : sizeof(gs_bytes_t);
    uint8_t *p;
    n = (uint32_t)schema_rule_count(body, f, n);
    p = n > 0 ? g->alloc(g->ctx, n * esize) : NULL;
    if (p == NULL) n = 0;
    for (uint32_t k = 0; k < n; k++) {
        gs_bytes_t *b = (gs_bytes_t *)(void *)(p + k * esize);
        if (f->kind != GS__F_PEERS) {
            *b = g->elem(g->ctx, f, f->kind == GS__F_STRS ? "str" : "bin", k);
        } else {
            gs_peer_info_t *pi = (gs_peer_info_t *)(void *)b;
            pi->id = g->id(g->ctx);
            pi->name = g->elem(g->ctx, f, "name", k);
            pi->host = g->elem(g->ctx, f, "host", k);
            pi->ucx_address = g->elem(g->ctx, f, "ucx", k);
        }
    }
    memcpy((uint8_t *)body + f->count_off, &n, sizeof n);
    return p;
}

#endif
