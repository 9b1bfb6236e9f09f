/* A graceful stop on SIGINT/SIGTERM: the handler only records the signal;
 * the training loop polls it at the step boundary, the ranks agree (a signal
 * may reach one rank only), save and exit 0. The one flag a signal handler
 * can write is necessarily process-global state. */
#ifndef MT_CORE_STOP_SIGNAL_H
#define MT_CORE_STOP_SIGNAL_H
#include "core/error.h"

/* Installs the handler for SIGINT and SIGTERM (clearing any earlier signal),
 * on an alternate signal stack of each thread of the OpenMP team. */
int mt_stop_signal_install(mt_error *err);
/* Restores the default actions. */
void mt_stop_signal_uninstall(void);
/* The signal received since install (SIGINT or SIGTERM), 0 if none. */
int mt_stop_signal_pending(void);

#endif
