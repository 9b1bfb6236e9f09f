#ifndef MT_TRAIN_FOOTPRINT_H
#define MT_TRAIN_FOOTPRINT_H
#include "comm/comm.h"
#include "train/opts.h"

/* Refuses a run that cannot fit in memory before anything is allocated: the
 * planner's bytes of a rank (plan/plan.h: parameters, gradients, AdamW
 * state, activations) times the ranks on this machine, against its physical
 * memory (or a container's lower limit). Needs o's model and micro-batch
 * final. Machines differ: callers agree on the result over the ranks. */
int mt_train_check_footprint(const mt_train_opts *o, mt_comm *world, mt_error *err);

#endif
