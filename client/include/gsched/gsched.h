/** @file gsched/gsched.h  Umbrella header: everything a gsched client program needs. */
#ifndef GSCHED_GSCHED_H
#define GSCHED_GSCHED_H
#include <gsched/status.h>
#include <gsched/array.h>
#include <gsched/client.h>
#endif
