/* The reference of the CPU fused kernel tests (fused_ref.c): an evaluator of gs_kfused_t specs
 * written independently of chunkops/cpu, and the checks that run a spec on the CPU backend and
 * compare every element or record with it (Criterion assertions). */
#ifndef GS_TESTS_CHUNKOPS_FUSED_REF_H
#define GS_TESTS_CHUNKOPS_FUSED_REF_H

#include "chunkops/chunkops.h"

/* a and b equal to @a rel relative (NaN equals NaN, infinities exactly). */
int fr_same(double a, double b, double rel);
/* Run @a k on a fresh CPU context; the test fails when the kernel refuses it. */
void fr_run_fused(const gs_kfused_t *k);
/* Operands of program opcode @a op; its value on @a a, @a b, and on @a x (immediate @a imm). */
int fr_arity(int op);
double fr_binary(int op, double a, double b);
double fr_unary(int op, double x, double imm);
/* Run @a k0 as a store and compare every element with the reference to @a rel. */
void fr_check_store(const gs_kfused_t *k0, double rel);
/* Run @a k0 as reduction @a op over @a axis (-1: every axis) and compare every record. */
void fr_check_reduce(const gs_kfused_t *k0, int op, int axis);

#endif
