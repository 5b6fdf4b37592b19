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
    if (f->rule == gs__rule_one_error_per_failure) {
        const gs_msg_task_done_t *t = body;
        uint64_t failed = 0;
        for (uint64_t i = 0; i < t->n; i++) failed += t->status[i] != GS_OK;
        return failed;
    }
    return dflt;
}

#endif
