#ifndef MT_TRAIN_PIPELINE_STEP_H
#define MT_TRAIN_PIPELINE_STEP_H
#include "train/state.h"

/* Pipeline (pipeline_step.c): builds the schedule and the layer split and
 * fills the model part this rank holds; then runs one step's microbatches
 * (forward, backward, messages, the ZeRO hooks) and returns this rank's
 * loss sum; the forward-only pass of evaluation. */
int mt_pipeline_plan(mt_trainer *tr, mt_model_part *part, unsigned char *own_layer, mt_error *err);
int mt_pipeline_init(mt_trainer *tr, mt_error *err);
void mt_pipeline_free(mt_trainer *tr);
double mt_pipeline_step(mt_trainer *tr, uint64_t first_sample, float dlogits_scale);
double mt_pipeline_eval_batch(mt_trainer *tr, uint64_t first_sample);
/* Pipeline rank whose copy of unit u is authoritative (unit 0: the first). */
int mt_pipeline_unit_rank(const mt_trainer *tr, int u);
/* The unit whose tensors the output unit shares (a tied embedding), or -1. */
int mt_pipeline_shared_unit(const mt_trainer *tr);

#endif
