/* The CUDA backend's device-memory arena. Pure bookkeeping over an address range, so these
 * run without a GPU: the arena is given a made-up base address and never dereferences it. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunkops/cuda/cuda_internal.h"
#include "common/alloc.h"

#define BASE ((uintptr_t)1 << 40)
#define MIB ((size_t)1 << 20)

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t used_of(gs__cuda_arena_t *a)
{
    size_t used;
    gs__cuda_arena_stats(a, &used, NULL, NULL, NULL);
    return used;
}

Test(chunkops_cuda_arena, exhaustion_returns_no_device_memory)
{
    gs__cuda_arena_t a;
    uintptr_t p, q;
    cr_assert_eq(gs__cuda_arena_init(&a, BASE, MIB), GS_OK);
    cr_assert_eq(gs__cuda_arena_alloc(&a, MIB, &p), GS_OK);
    cr_assert_eq(p, BASE);
    q = 7;
    cr_assert_eq(gs__cuda_arena_alloc(&a, 1, &q), GS_ERR_NO_DEVICE_MEMORY);
    cr_assert_eq(q, 7, "output written on failure");
    cr_assert_eq(gs__cuda_arena_free(&a, p), GS_OK);
    cr_assert_eq(gs__cuda_arena_alloc(&a, MIB + 1, &q), GS_ERR_NO_DEVICE_MEMORY);
    cr_assert_eq(gs__cuda_arena_alloc(&a, MIB, &q), GS_OK);
    cr_assert_eq(gs__cuda_arena_free(&a, q), GS_OK);
    gs__cuda_arena_cleanup(&a);
}

Test(chunkops_cuda_arena, zero_byte_allocations_are_unique_and_aligned)
{
    gs__cuda_arena_t a;
    uintptr_t p[16];
    cr_assert_eq(gs__cuda_arena_init(&a, BASE, MIB), GS_OK);
    for (int i = 0; i < 16; i++) {
        cr_assert_eq(gs__cuda_arena_alloc(&a, 0, &p[i]), GS_OK);
        cr_assert_eq(p[i] % GS__ARENA_UNIT, 0);
        for (int j = 0; j < i; j++) cr_assert_neq(p[i], p[j]);
    }
    cr_assert_eq(used_of(&a), 16 * GS__ARENA_UNIT);
    for (int i = 0; i < 16; i++) cr_assert_eq(gs__cuda_arena_free(&a, p[i]), GS_OK);
    cr_assert_eq(used_of(&a), 0);
    gs__cuda_arena_cleanup(&a);
}

Test(chunkops_cuda_arena, freeing_neighbours_coalesces_into_one_block)
{
    gs__cuda_arena_t a;
    uintptr_t x, y, z, w;
    size_t largest;
    cr_assert_eq(gs__cuda_arena_init(&a, BASE, 3 * MIB), GS_OK);
    cr_assert_eq(gs__cuda_arena_alloc(&a, MIB, &x), GS_OK);
    cr_assert_eq(gs__cuda_arena_alloc(&a, MIB, &y), GS_OK);
    cr_assert_eq(gs__cuda_arena_alloc(&a, MIB, &z), GS_OK);
    cr_assert_eq(gs__cuda_arena_free(&a, x), GS_OK);
    cr_assert_eq(gs__cuda_arena_free(&a, z), GS_OK);
    gs__cuda_arena_stats(&a, NULL, NULL, NULL, &largest);
    cr_assert_eq(largest, MIB, "two separate 1 MiB holes");
    cr_assert_eq(gs__cuda_arena_alloc(&a, 2 * MIB, &w), GS_ERR_NO_DEVICE_MEMORY);
    cr_assert_eq(gs__cuda_arena_free(&a, y), GS_OK);
    gs__cuda_arena_stats(&a, NULL, NULL, NULL, &largest);
    cr_assert_eq(largest, 3 * MIB);
    cr_assert_eq(gs__cuda_arena_alloc(&a, 3 * MIB, &w), GS_OK);
    cr_assert_eq(w, BASE);
    cr_assert_eq(gs__cuda_arena_free(&a, w), GS_OK);
    gs__cuda_arena_cleanup(&a);
}

Test(chunkops_cuda_arena, rejects_unknown_and_double_free)
{
    gs__cuda_arena_t a;
    uintptr_t p;
    size_t n;
    cr_assert_eq(gs__cuda_arena_init(&a, BASE, MIB), GS_OK);
    cr_assert_eq(gs__cuda_arena_alloc(&a, 1000, &p), GS_OK);
    cr_assert_eq(gs__cuda_arena_free(&a, p + GS__ARENA_UNIT), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs__cuda_arena_free(&a, p + 8), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs__cuda_arena_free(&a, BASE - GS__ARENA_UNIT), GS_ERR_INVALID_PARAM);
    gs__cuda_arena_stats(&a, NULL, NULL, &n, NULL);
    cr_assert_eq(n, 1);
    cr_assert_eq(gs__cuda_arena_free(&a, p), GS_OK);
    cr_assert_eq(gs__cuda_arena_free(&a, p), GS_ERR_INVALID_PARAM);
    gs__cuda_arena_stats(&a, NULL, NULL, &n, NULL);
    cr_assert_eq(n, 0);
    gs__cuda_arena_cleanup(&a);
}

Test(chunkops_cuda_arena, host_allocation_failure_leaves_it_unchanged)
{
    gs__cuda_arena_t a;
    uintptr_t p;
    cr_assert_eq(gs__cuda_arena_init(&a, BASE, MIB), GS_OK);
    gs_alloc_fail_after(0);
    gs_status_t st = gs__cuda_arena_alloc(&a, 4096, &p);
    gs_alloc_fail_after(-1);
    cr_assert_eq(st, GS_ERR_NO_MEMORY);
    cr_assert_eq(used_of(&a), 0);
    cr_assert_eq(gs__cuda_arena_alloc(&a, MIB, &p), GS_OK, "the whole range is still free");
    cr_assert_eq(gs__cuda_arena_free(&a, p), GS_OK);
    gs__cuda_arena_cleanup(&a);
}

/* Random allocations and frees against a model: every block aligned, inside the range,
 * disjoint from every other live block; usage accounted in units; everything free at the end
 * coalesces back into one block. */
Test(chunkops_cuda_arena, random_workload_keeps_blocks_disjoint)
{
    enum { NLIVE = 512, STEPS = 20000 };
    const size_t size = 64 * MIB;
    gs__cuda_arena_t a;
    uintptr_t addr[NLIVE];
    size_t len[NLIVE];
    int live[NLIVE];
    size_t used = 0;
    rng_state = 42;
    memset(live, 0, sizeof(live));
    cr_assert_eq(gs__cuda_arena_init(&a, BASE, size), GS_OK);
    for (int step = 0; step < STEPS; step++) {
        int i = (int)(rnd() % NLIVE);
        if (live[i]) {
            cr_assert_eq(gs__cuda_arena_free(&a, addr[i]), GS_OK);
            used -= len[i] == 0 ? GS__ARENA_UNIT
                                : (len[i] + GS__ARENA_UNIT - 1) / GS__ARENA_UNIT * GS__ARENA_UNIT;
            live[i] = 0;
        } else {
            size_t n = (rnd() % 4 == 0) ? (size_t)(rnd() % (2 * MIB)) : (size_t)(rnd() % 5000);
            uintptr_t p;
            gs_status_t st = gs__cuda_arena_alloc(&a, n, &p);
            if (st == GS_ERR_NO_DEVICE_MEMORY) continue;
            cr_assert_eq(st, GS_OK);
            size_t rounded = n == 0 ? GS__ARENA_UNIT
                                    : (n + GS__ARENA_UNIT - 1) / GS__ARENA_UNIT * GS__ARENA_UNIT;
            cr_assert_eq(p % GS__ARENA_UNIT, 0);
            cr_assert(p >= BASE && p + rounded <= BASE + size, "block outside the range");
            for (int j = 0; j < NLIVE; j++) {
                if (!live[j]) continue;
                size_t lj = len[j] == 0 ? 1 : len[j];
                cr_assert(p + rounded <= addr[j] || addr[j] + lj <= p, "blocks %d and new overlap",
                          j);
            }
            addr[i] = p;
            len[i] = n;
            live[i] = 1;
            used += rounded;
        }
        if (step % 997 == 0) cr_assert_eq(used_of(&a), used);
    }
    for (int i = 0; i < NLIVE; i++)
        if (live[i]) cr_assert_eq(gs__cuda_arena_free(&a, addr[i]), GS_OK);
    size_t largest, n;
    gs__cuda_arena_stats(&a, NULL, NULL, &n, &largest);
    cr_assert_eq(n, 0);
    cr_assert_eq(largest, size, "free blocks did not coalesce back");
    gs__cuda_arena_cleanup(&a);
}

struct worker_arg {
    gs__cuda_arena_t *a;
    int fails;
};

static void *arena_worker(void *p)
{
    struct worker_arg *arg = p;
    uintptr_t mine[64];
    int ok[64];
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 64; i++) {
            ok[i] = gs__cuda_arena_alloc(arg->a, (size_t)(i * 1000 + round), &mine[i]) == GS_OK;
            if (!ok[i]) arg->fails++;
        }
        for (int i = 0; i < 64; i++)
            if (ok[i] && gs__cuda_arena_free(arg->a, mine[i]) != GS_OK) arg->fails++;
    }
    return NULL;
}

/* Two threads allocate and free concurrently (8 MiB each at most in a 16 MiB arena): no
 * failure, and the arena is whole again afterwards. */
Test(chunkops_cuda_arena, concurrent_threads_never_fail_within_capacity)
{
    gs__cuda_arena_t a;
    struct worker_arg args[2] = {{&a, 0}, {&a, 0}};
    pthread_t t[2];
    cr_assert_eq(gs__cuda_arena_init(&a, BASE, 16 * MIB), GS_OK);
    for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&t[i], NULL, arena_worker, &args[i]), 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) cr_assert_eq(args[i].fails, 0);
    size_t largest, n;
    gs__cuda_arena_stats(&a, NULL, NULL, &n, &largest);
    cr_assert_eq(n, 0);
    cr_assert_eq(largest, 16 * MIB);
    gs__cuda_arena_cleanup(&a);
}
