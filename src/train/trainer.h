/* The training loop: microbatches with gradient accumulation, global-norm
 * clipping, the optimizer step, evaluation, metrics and checkpoints. */
#ifndef MT_TRAIN_TRAINER_H
#define MT_TRAIN_TRAINER_H
#include "train/accounting.h"
#include "train/pipeline_step.h"
#include "train/state.h"


/* Collective over world (a process is the mesh 1x1x1: world of size 1).
 * On failure every rank returns -1 with the same message (a rank-local
 * failure is broadcast, prefixed with the rank). */
int mt_trainer_init(mt_trainer *tr, const mt_train_opts *o, mt_comm *world, mt_error *err);
/* Runs one optimizer step; returns the mean loss over the global batch. */
double mt_trainer_step(mt_trainer *tr);
/* Mean validation loss over the first eval_batches x eval_batch sequences of the val set (layout-free). */
double mt_trainer_eval(mt_trainer *tr);
/* Trains to the last step and saves. SIGINT/SIGTERM stop it at a step
 * boundary (then it saves); from its start they are only recorded, also
 * after it returns (mt_stop_signal_uninstall restores the default), so one
 * arriving during a save, while the outputs are written or at the exit
 * lets them finish. */
int mt_trainer_run(mt_trainer *tr, mt_error *err);
/* Collective: with {trace}, writes every rank's spans into one file (rank 0)
 * and prints each rank's idle fraction (time in no compute span over the
 * traced window). */
int mt_trainer_write_trace(mt_trainer *tr, mt_error *err);
void mt_trainer_free(mt_trainer *tr);

#endif
