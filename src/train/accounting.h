#ifndef MT_TRAIN_ACCOUNTING_H
#define MT_TRAIN_ACCOUNTING_H
#include "train/state.h"

/* Accounting (accounting.c), collective over world: at start (after init)
 * and at the end every rank's bytes per memory category and bytes sent per
 * step per collective are gathered; rank 0 prints them (unless {log-every}
 * 0) and writes {report-json} with rank 0's numbers at top level and every
 * rank's under "ranks". */
void mt_trainer_accounting_alloc(mt_trainer *tr, mt_comm *world);
void mt_trainer_accounting_free(mt_trainer *tr);
void mt_trainer_report_start(mt_trainer *tr);
int mt_trainer_report_end(mt_trainer *tr, mt_error *err);

#endif
