/* Placement (place.c). Not installed. */
#ifndef GS_SCHEDULER_PLACE_H
#define GS_SCHEDULER_PLACE_H

#include "scheduler/sched_int.h"

/* One placement pass: flush pending releases, then place the ready tasks of the active graphs
 * on workers with room. */
void gs__sched_tick(gs_sched_t *s);

#endif
