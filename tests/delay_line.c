/* A delay line for the multi-host test (tests/check_multihost.sh), where the
 * kernel has no netem: it joins two TAP devices that may sit in different
 * network namespaces and passes every Ethernet frame from one to the other
 * DELAY_MS later, both ways, keeping their order.
 *
 *   delay_line DELAY_MS TAP_A NETNS_A TAP_B NETNS_B
 *
 * TAP_A is opened in the network namespace NETNS_A (a path such as
 * /var/run/netns/NAME, or - for the caller's own); likewise TAP_B. The devices must exist
 * (`ip tuntap add mode tap`); while the program holds them their carrier is
 * up. A frame that cannot be delivered (the far device is down) is dropped,
 * as a cable drops it; a full queue drops the newest frame, as a router's
 * tail-drop queue does. SIGTERM or SIGINT ends it. A test tool, not part of
 * meshtrain. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define FRAME_MAX 65550 /* a TAP frame is at most the MTU (<= 64 KiB) plus its header */
#define QUEUE_LEN 2048  /* frames in flight per direction */

typedef struct {
    int64_t due_ns;
    int len;
    unsigned char *data;
} frame;

typedef struct {
    int in, out; /* read from in, deliver to out */
    frame q[QUEUE_LEN];
    int head, count;
    long passed, dropped;
} direction;

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) { (void)sig; stop_requested = 1; }

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int open_tap(const char *name, const char *netns) {
    int home = -1;
    if (netns) { /* the TAP's fd belongs to the namespace current at TUNSETIFF */
        home = open("/proc/self/ns/net", O_RDONLY);
        int ns = open(netns, O_RDONLY);
        if (home < 0 || ns < 0 || setns(ns, CLONE_NEWNET) != 0) {
            fprintf(stderr, "delay_line: cannot enter network namespace %s: %s\n", netns, strerror(errno));
            exit(1);
        }
        close(ns);
    }
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
    if (fd < 0 || ioctl(fd, TUNSETIFF, &ifr) != 0) {
        fprintf(stderr, "delay_line: cannot attach TAP device %s%s%s: %s\n", name, netns ? " in " : "",
                netns ? netns : "", strerror(errno));
        exit(1);
    }
    if (netns && setns(home, CLONE_NEWNET) != 0) {
        fprintf(stderr, "delay_line: cannot return to the first network namespace: %s\n", strerror(errno));
        exit(1);
    }
    if (home >= 0) close(home);
    return fd;
}

/* Reads every frame waiting on d->in into the queue, due delay_ns from now. */
static void take_frames(direction *d, int64_t delay_ns, unsigned char *scratch) {
    for (;;) {
        ssize_t n = read(d->in, scratch, FRAME_MAX);
        if (n <= 0) return; /* EAGAIN: drained; EIO: the device is down */
        if (d->count == QUEUE_LEN) {
            d->dropped++;
            continue;
        }
        frame *f = &d->q[(d->head + d->count) % QUEUE_LEN];
        memcpy(f->data, scratch, (size_t)n);
        f->len = (int)n;
        f->due_ns = now_ns() + delay_ns;
        d->count++;
    }
}

/* Delivers the frames that are due; returns ns until the next one, or -1. */
static int64_t deliver_due(direction *d) {
    int64_t now = now_ns();
    while (d->count > 0) {
        frame *f = &d->q[d->head];
        if (f->due_ns > now) return f->due_ns - now;
        if (write(d->out, f->data, (size_t)f->len) == f->len)
            d->passed++;
        else
            d->dropped++; /* the far device is down, or its queue is full */
        d->head = (d->head + 1) % QUEUE_LEN;
        d->count--;
    }
    return -1;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: delay_line DELAY_MS TAP_A NETNS_A|- TAP_B NETNS_B|-\n");
        return 2;
    }
    char *end;
    double delay_ms = strtod(argv[1], &end);
    if (*end || !(delay_ms >= 0 && delay_ms <= 10000)) {
        fprintf(stderr, "delay_line: DELAY_MS must be a number of milliseconds in [0, 10000], got '%s'\n", argv[1]);
        return 2;
    }
    const char *a = argv[2], *b = argv[4];
    const char *ns_a = strcmp(argv[3], "-") ? argv[3] : NULL, *ns_b = strcmp(argv[5], "-") ? argv[5] : NULL;
    int fa = open_tap(a, ns_a), fb = open_tap(b, ns_b);
    static direction dir[2];
    dir[0].in = fa, dir[0].out = fb;
    dir[1].in = fb, dir[1].out = fa;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < QUEUE_LEN; i++)
            if (!(dir[k].q[i].data = malloc(FRAME_MAX))) {
                fprintf(stderr, "delay_line: out of memory for the frame queues\n");
                return 1;
            }
    unsigned char *scratch = malloc(FRAME_MAX);
    if (!scratch) return 1;
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    int64_t delay_ns = (int64_t)(delay_ms * 1e6);
    while (!stop_requested) {
        int64_t wait_ns = -1;
        for (int k = 0; k < 2; k++) {
            int64_t w = deliver_due(&dir[k]);
            if (w >= 0 && (wait_ns < 0 || w < wait_ns)) wait_ns = w;
        }
        struct pollfd p[2] = {{fa, POLLIN, 0}, {fb, POLLIN, 0}};
        /* poll's resolution is 1 ms: round up so a frame is never early */
        int timeout_ms = wait_ns < 0 ? 200 : (int)((wait_ns + 999999) / 1000000);
        if (poll(p, 2, timeout_ms) < 0 && errno != EINTR) {
            perror("delay_line: poll");
            return 1;
        }
        for (int k = 0; k < 2; k++)
            if (p[k].revents & POLLIN) take_frames(&dir[k], delay_ns, scratch);
    }
    fprintf(stderr, "delay_line %s<->%s: %ld and %ld frames passed, %ld and %ld dropped\n", a, b, dir[0].passed,
            dir[1].passed, dir[0].dropped, dir[1].dropped);
    return 0;
}
