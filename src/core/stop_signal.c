#include "core/stop_signal.h"
#include <errno.h>
#include <signal.h>
#include <string.h>

static volatile sig_atomic_t received;

static void on_signal(int sig) { received = sig; }

int mt_stop_signal_install(mt_error *err) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* blocking calls go on; the loop looks at the flag after the step */
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
