#include "core/stop_signal.h"
#include <errno.h>
#include <signal.h>
#include <string.h>

static volatile sig_atomic_t received;

static void on_signal(int sig) { received = sig; }

/* The handler runs on a stack of its own: oneDNN's JIT GEMM kernels point
 * rsp into a heap workspace, and a signal frame pushed there corrupts the
 * heap (a later free aborts; oneDNN issue #4845, fixed after the version
 * used here). Every thread of the OpenMP team may run such a kernel and
 * receive the signal, so each gets one (the pool keeps its threads). */
static _Thread_local char alt_stack[65536];

static int use_alt_stack(void) {
    stack_t ss = {.ss_sp = alt_stack, .ss_size = sizeof alt_stack, .ss_flags = 0};
    return sigaltstack(&ss, NULL);
}

int mt_stop_signal_install(mt_error *err) {
    int failed = 0;
#pragma omp parallel reduction(+ : failed)
    failed += use_alt_stack() != 0;
    if (failed)
        return mt_errorf(err, "cannot give the SIGINT/SIGTERM handler its own stack (sigaltstack failed on %d thread%s)",
                         failed, failed > 1 ? "s" : "");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_ONSTACK; /* blocking calls go on; the loop looks at the flag after the step */
    received = 0;
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
        return mt_errorf(err, "cannot install the SIGINT/SIGTERM handler: %s", strerror(errno));
    return 0;
}

void mt_stop_signal_uninstall(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int mt_stop_signal_pending(void) { return (int)received; }
