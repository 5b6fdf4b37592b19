/*
 * The message schema as data (from proto/msg_schema.h) and the semantic checks derived from it,
 * shared by the encoder (which refuses with GS_ERR_INVALID_PARAM) and the decoder (GS_ERR_PROTO),
 * so every message that encodes also decodes.
 */
#include "proto/msg_schema.h"

#include "common/error.h"
#include "proto/msg_codec.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Size of a field as the table's kind sees it: the scalar, or one entry of a table. */
#define GS__SIZE_UINT(T, f) sizeof(((T *)0)->f)
#define GS__SIZE_INT(T, f) sizeof(((T *)0)->f)
#define GS__SIZE_TAB(T, f) sizeof(*((T *)0)->f)
#define GS__SIZE_CSR(T, f) sizeof(*((T *)0)->f)
#define GS__SIZE_DTAB(T, f) sizeof(*((T *)0)->f)
#define GS__SIZE_STR(T, f) 0
#define GS__SIZE_BIN(T, f) 0
#define GS__SIZE_CHUNK(T, f) 0
#define GS__SIZE_STRS(T, f) 0
#define GS__SIZE_BINS(T, f) 0
#define GS__SIZE_PEERS(T, f) 0

#define GS__FIELD(member, field, kind, count, per, rule)                                             \
    {#field, #count, GS__F_##kind, GS__SIZE_##kind(gs_msg_##member##_t, field), per,                 \
     sizeof(((gs_msg_##member##_t *)0)->count), offsetof(gs_msg_##member##_t, field),                \
     offsetof(gs_msg_##member##_t, count), rule},

/* One array per type, ending with a NULL-named sentinel (so that types without fields have one). */
#define GS__FIELDS(TYPE, name, max) \
    static const gs__field_t gs__fields_##TYPE[] = {GS_MSG_FIELDS_##TYPE(GS__FIELD){NULL, NULL, 0, 0, 0, 0, 0, 0, 0}};
GS_MSG_TYPES(GS__FIELDS)

#define GS__DESC(TYPE, name, max) \
    [GS_MSG_##TYPE] = {name, gs__fields_##TYPE, sizeof gs__fields_##TYPE / sizeof gs__fields_##TYPE[0] - 1, max},
static const gs__msg_desc_t gs__msg_descs[GS_MSG_TYPE_MAX] = {GS_MSG_TYPES(GS__DESC)};

const gs__msg_desc_t *gs__msg_desc(uint32_t type)
{
    if (type >= GS_MSG_TYPE_MAX || gs__msg_descs[type].name == NULL) return NULL;
    return &gs__msg_descs[type];
}

const char *gs_msg_type_name(uint32_t type)
{
    const gs__msg_desc_t *d = gs__msg_desc(type);
    return d != NULL ? d->name : "unknown";
}

int gs__why_set(gs__why_t *why, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why->text, sizeof why->text, fmt, ap);
    va_end(ap);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* What every field of a kind satisfies.                                                      */

static int gs__check_bytes(const gs_bytes_t *b, const char *what, gs__why_t *why)
{
    if (b->data == NULL && b->len > 0) return gs__why_set(why, "%s has %zu bytes but no data", what, b->len);
    return 1;
}

static int gs__check_str(const gs_str_t *s, const char *what, gs__why_t *why)
{
    if (!gs__check_bytes(s, what, why)) return 0;
    if (s->len > 0 && memchr(s->data, 0, s->len) != NULL) {
        return gs__why_set(why, "%s contains a NUL byte", what);
    }
    return 1;
}

static int gs__check_table(const void *p, uint64_t n, const char *what, gs__why_t *why)
{
    if (p == NULL && n > 0) {
        return gs__why_set(why, "%s is NULL but has %llu entries", what, (unsigned long long)n);
    }
    return 1;
}

/* CSR offsets: ntasks + 1 entries starting at 0, never decreasing (the last one is ndeps).
 * NULL is accepted for ntasks == 0 (encoded as [0]). */
static int gs__check_csr(const uint64_t *dep_off, uint64_t ntasks, const char *what, gs__why_t *why)
{
    if (dep_off == NULL) {
        if (ntasks == 0) return 1;
        return gs__why_set(why, "%s is NULL for %llu tasks", what, (unsigned long long)ntasks);
    }
    if (dep_off[0] != 0) return gs__why_set(why, "%s[0] is %llu, not 0", what, (unsigned long long)dep_off[0]);
    for (uint64_t i = 0; i < ntasks; i++) {
        if (dep_off[i + 1] < dep_off[i]) {
            return gs__why_set(why, "%s decreases at task %llu (%llu after %llu)", what, (unsigned long long)i,
                               (unsigned long long)dep_off[i + 1], (unsigned long long)dep_off[i]);
        }
    }
    return 1;
}

/* An array of strings or byte strings (or peers: their strings and addresses). */
static int gs__check_array(const void *body, const gs__field_t *f, gs__why_t *why)
{
    const void *p = gs__field_ptr(body, f);
    uint64_t n = gs__field_count(body, f);
    char what[64];
    if (!gs__check_table(p, n, f->name, why)) return 0;
    for (uint64_t i = 0; i < n; i++) {
        snprintf(what, sizeof what, "%s[%llu]", f->name, (unsigned long long)i);
        if (f->kind == GS__F_STRS && !gs__check_str(&((const gs_str_t *)p)[i], what, why)) return 0;
        if (f->kind == GS__F_BINS && !gs__check_bytes(&((const gs_bytes_t *)p)[i], what, why)) return 0;
        if (f->kind == GS__F_PEERS) {
            const gs_peer_info_t *pi = &((const gs_peer_info_t *)p)[i];
            if (!gs__check_str(&pi->name, what, why) || !gs__check_str(&pi->host, what, why) ||
                !gs__check_bytes(&pi->ucx_address, what, why)) {
                return 0;
            }
        }
    }
    return 1;
}

/* The checks of one field's kind; *ndeps_p carries the CSR field's count to the DTAB fields. */
static int gs__check_field(const void *body, const gs__field_t *f, uint64_t *ndeps_p, gs__why_t *why)
{
    switch (f->kind) {
    case GS__F_STR: return gs__check_str(gs__field_at(body, f), f->name, why);
    case GS__F_BIN:
    case GS__F_CHUNK: return gs__check_bytes(gs__field_at(body, f), f->name, why);
    case GS__F_TAB: return gs__check_table(gs__field_ptr(body, f), gs__field_count(body, f), f->name, why);
    case GS__F_DTAB: return gs__check_table(gs__field_ptr(body, f), *ndeps_p, f->name, why);
    case GS__F_CSR:
        if (!gs__check_csr(gs__field_ptr(body, f), gs__field_count(body, f), f->name, why)) return 0;
        *ndeps_p = gs__csr_ndeps(body, f);
        return 1;
    case GS__F_STRS:
    case GS__F_BINS:
    case GS__F_PEERS: return gs__check_array(body, f, why);
    default: return 1;  /* integers: the range is checked by their C type */
    }
}

int gs__msg_check(const gs_msg_t *m, gs__why_t *why)
{
    const gs__msg_desc_t *d = gs__msg_desc(m->type);
    uint64_t ndeps = 0;
    if (d == NULL) return gs__why_set(why, "unknown message type %u", m->type);
    for (unsigned i = 0; i < d->nfields; i++) {
        const gs__field_t *f = &d->fields[i];
        if (!gs__check_field(&m->u, f, &ndeps, why)) return 0;
        if (f->rule != GS__NO_RULE && !f->rule(&m->u, f, why)) return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* The rules the table names.                                                                 */

int gs__rule_peer_role(const void *body, const gs__field_t *f, gs__why_t *why)
{
    uint64_t role = gs__uint_at(body, f->off, f->size);
    if (role != GS_ROLE_CLIENT && role != GS_ROLE_WORKER) {
        return gs__why_set(why, "unknown peer role %llu", (unsigned long long)role);
    }
    return 1;
}

/* graph_submit.task_layer: every task names one of the message's layers. */
int gs__rule_layer_index(const void *body, const gs__field_t *f, gs__why_t *why)
{
    const gs_msg_graph_submit_t *g = body;
    (void)f;
    for (uint64_t i = 0; i < g->ntasks; i++) {
        if (g->task_layer[i] >= g->nlayers) {
            return gs__why_set(why, "task %llu uses layer %u of %u", (unsigned long long)i, g->task_layer[i],
                               g->nlayers);
        }
    }
    return 1;
}

/* task_done.errors: one message per failed status, in order. */
int gs__rule_one_error_per_failure(const void *body, const gs__field_t *f, gs__why_t *why)
{
    const gs_msg_task_done_t *t = body;
    uint64_t failed = 0;
    (void)f;
    for (uint64_t i = 0; i < t->n; i++) failed += t->status[i] != GS_OK;
    if (failed != t->nerrors) {
        return gs__why_set(why, "%u error messages for %llu failed tasks", t->nerrors, (unsigned long long)failed);
    }
    return 1;
}

/* A string array of a message whose entries are counted by its leading `uint32_t n` (bandwidth,
 * workers): exactly one string per entry. */
_Static_assert(offsetof(gs_msg_bandwidth_t, n) == 0 && offsetof(gs_msg_workers_t, n) == 0 &&
                   offsetof(gs_msg_locations_t, n) == 0,
               "gs__rule_one_per_entry reads n at offset 0");
_Static_assert(sizeof(((gs_msg_bandwidth_t *)0)->n) == 4 && sizeof(((gs_msg_workers_t *)0)->n) == 4,
               "gs__rule_one_per_entry reads a uint32_t n");
int gs__rule_one_per_entry(const void *body, const gs__field_t *f, gs__why_t *why)
{
    uint64_t n = gs__uint_at(body, 0, 4), have = gs__field_count(body, f);
    if (have != n) {
        return gs__why_set(why, "%llu %s for %llu entries", (unsigned long long)have, f->name,
                           (unsigned long long)n);
    }
    return 1;
}

/* graph_submit.layer_names: none or one per layer, each short (gsched shows them as text and
 * never interprets them; it replaces bytes outside printable ASCII when it shows them). */
int gs__rule_layer_names(const void *body, const gs__field_t *f, gs__why_t *why)
{
    const gs_msg_graph_submit_t *g = body;
    (void)f;
    if (g->nlayer_names != 0 && g->nlayer_names != g->nlayers) {
        return gs__why_set(why, "%u layer names for %u layers (0 or one per layer)", g->nlayer_names, g->nlayers);
    }
    for (uint32_t i = 0; i < g->nlayer_names; i++) {
        const gs_str_t *s = &g->layer_names[i];
        if (s->len > GS_MSG_LAYER_NAME_MAX) {
            return gs__why_set(why, "layer name %u has %zu bytes (at most %u)", i, s->len, GS_MSG_LAYER_NAME_MAX);
        }
    }
    return 1;
}

/* replicate.nsrc: a client sends no sources, gsched one per key. */
int gs__rule_none_or_one_per_key(const void *body, const gs__field_t *f, gs__why_t *why)
{
    const gs_msg_replicate_t *r = body;
    (void)f;
    if (r->nsrc != 0 && r->nsrc != r->n) {
        return gs__why_set(why, "%llu sources for %llu keys (0 or one per key)", (unsigned long long)r->nsrc,
                           (unsigned long long)r->n);
    }
    return 1;
}
