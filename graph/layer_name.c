/* Readable operation names of layers (taskgraph.h: gs_layer_display_name), sent by the client
 * in GRAPH_SUBMIT so that gsched's dashboard and reports can show them without decoding layers. */
#include "graph/graph_internal.h"
#include "graph/stencil_int.h"
#include "graph/kernel.h"
#include "graph/taskgraph.h"

#include <string.h>

static const char *const gs__dop_names[] = {
#define GS__DOP_NAME(sym, val, name, arity) [val] = name,
    GS_OPCODE_MAP(GS__DOP_NAME)
#undef GS__DOP_NAME
};

/* Append part @a s (its first @a n bytes) to the name in @a out (@a cap bytes) unless it is
 * there already, joined by '+'; once a part does not fit, the name ends with "+..." (whole
 * parts dropped to make room; "..." alone when none fits). */
static void gs__dname_add(char *out, size_t cap, const char *s, size_t n)
{
    size_t len = strlen(out);
    for (const char *p = out; n > 0 && *p != '\0';) {   /* the parts so far, between '+' */
        const char *e = strchr(p, '+');
        size_t pn = e != NULL ? (size_t)(e - p) : strlen(p);
        if (pn == n && memcmp(p, s, n) == 0) return;
        if (pn == 3 && memcmp(p, "...", 3) == 0) return;
        p += pn + (e != NULL);
    }
    if (n == 0) return;
    if (len + (len > 0) + n + 1 > cap) {   /* drop whole parts until "+..." fits */
        while (len > 0 && len + 5 > cap) {
            char *plus = strrchr(out, '+');
            len = plus != NULL ? (size_t)(plus - out) : 0;
            out[len] = '\0';
        }
        if (len > 0) memcpy(out + len, "+...", 5);
        else if (cap >= 4) memcpy(out, "...", 4);
        return;
    }
    if (len > 0) out[len++] = '+';
    memcpy(out + len, s, n);
    out[len + n] = '\0';
}

/* The name of a fused layer: its random and index leaves, its operations (without the "_imm"
 * of scalar forms), then its reduction; a program of chunk leaves and nothing else is a slice. */
static void gs__dname_fused(const gs_layer_t *l, char *out, size_t cap)
{
    static const char *const leaves[GS_LEAF_KIND_COUNT] = {
        [GS_LEAF_NORMAL] = "normal",          [GS_LEAF_UNIFORM] = "uniform",
        [GS_LEAF_INDEX] = "arange",           [GS_LEAF_NORMAL_V2] = "normal",
        [GS_LEAF_UNIFORM_F32] = "uniform",    [GS_LEAF_NORMAL_F32] = "normal",
        [GS_LEAF_INTEGERS] = "integers",      [GS_LEAF_NORMAL_V3] = "normal",
        [GS_LEAF_NORMAL_F32_V3] = "normal",   [GS_LEAF_NORMAL_F32_V4] = "normal"};
    for (int32_t k = 0; k < l->u.f.nleaves; k++) {
        int32_t kind = l->u.f.leaves[k].kind;
        if (kind > 0 && kind < GS_LEAF_KIND_COUNT && leaves[kind] != NULL) gs__dname_add(out, cap, leaves[kind], strlen(leaves[kind]));
    }
    for (int32_t i = 0; i < l->u.f.nprog; i++) {
        int32_t op = l->u.f.prog[i].op;
        const char *name, *imm;
        if (op == GS_OP_LEAF || op == GS_OP_CONST || op < 0 ||
            (size_t)op >= sizeof gs__dop_names / sizeof gs__dop_names[0] || (name = gs__dop_names[op]) == NULL) {
            continue;
        }
        imm = strstr(name, "_imm");
        gs__dname_add(out, cap, name, imm != NULL ? (size_t)(imm - name) : strlen(name));
    }
    if (l->u.f.terminal == GS_TERM_REDUCE) {
        const char *r = gs_layer_name(l);
        if (strncmp(r, "reduce-", 7) == 0) r += 7;
        gs__dname_add(out, cap, r, strlen(r));
    }
    if (out[0] == '\0') gs__dname_add(out, cap, "slice", 5);
}

void gs_layer_display_name(const gs_layer_t *l, char *out, size_t cap)
{
    if (cap == 0) return;
    out[0] = '\0';
    if (gs_layer_kind(l) == GS_LAYER_FUSED) {
        gs__dname_fused(l, out, cap);
    } else if (gs_layer_kind(l) == GS_LAYER_USER && l->u.ub.fuse != NULL) {
        /* a fused user kernel: its producers, "map_blocks", its consumer ("exp+add+map_blocks
         * +mul+sum"; a consumer that only reads the kernel's output adds nothing) */
        const gs__ufuse_t *f = l->u.ub.fuse;
        for (int k = 0; k < GS_KERNEL_MAX_USER_IN; k++)
            if (f->pre[k] != NULL) gs__dname_fused(f->pre[k], out, cap);
        gs__dname_add(out, cap, "map_blocks", 10);
        if (f->post != NULL) gs__dname_fused(f->post, out, cap);
    } else {
        const char *name = gs_layer_name(l);
        gs__dname_add(out, cap, name, strlen(name));
    }
}
