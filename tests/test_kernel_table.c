/* ops/kernel_table: the backend seam's dispatch. A backend with a kernel
 * table runs the table's entry in place of the CPU op, with the op's
 * arguments (a void op and one that returns a value); an op the table lacks
 * fails with one line naming it and the device (in a child process, since
 * it exits); the CPU backend (no table) runs the CPU kernel. */
#include <sys/wait.h>
#include "ops/kernel_table.h"
#include "testlib.h"

static int gelu_calls;
static const float *gelu_inp;
static size_t gelu_n;
static void fake_gelu(mt_backend *be, float *out, const float *inp, size_t n) {
    (void)be;
    gelu_calls++;
    gelu_inp = inp;
    gelu_n = n;
    for (size_t i = 0; i < n; i++) out[i] = -1.0f;
}
static double fake_sumsq(mt_backend *be, const float *x, size_t n) {
    (void)be;
    (void)x;
    return (double)n * 10.0;
}

int main(void) {
    float in[5] = {1, 2, 3, 4, 5}, out[5] = {0};
    mt_kernel_table t = {0};
    t.gelu_forward = fake_gelu;
    t.sumsq = fake_sumsq;
    mt_backend dev = mt_backend_cpu(MT_GEMM_DEFAULT);
    dev.kind = MT_DEVICE_CUDA;
    dev.kernels = &t;
    op_gelu_forward(&dev, out, in, 5);
    CHECK(gelu_calls == 1 && gelu_inp == in && gelu_n == 5 && out[4] == -1.0f, "the table's gelu_forward ran (%d)",
          gelu_calls);
    CHECK(op_sumsq(&dev, in, 5) == 50.0, "the table's sumsq's value is returned");
    /* the CPU backend runs the CPU kernel */
    op_gelu_forward(BE, out, in, 5);
    CHECK(gelu_calls == 1 && out[0] > 0.84f && out[0] < 0.85f, "the CPU gelu ran: %g", (double)out[0]);
    CHECK(op_sumsq(BE, in, 5) == 55.0, "the CPU sum of squares");
    /* a missing entry: one line naming the op and the device, non-zero exit */
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        op_gelu_backward(&dev, out, in, in, 5);
        _exit(0); /* not reached when the missing entry is refused */
    }
    close(fds[1]);
    char msg[512] = {0};
    size_t got = 0;
    ssize_t r;
    while (got < sizeof msg - 1 && (r = read(fds[0], msg + got, sizeof msg - 1 - got)) > 0) got += (size_t)r;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "a missing kernel exits with failure");
    CHECK(strstr(msg, "op_gelu_backward") && strstr(msg, "cuda backend"), "message names op and device: %s", msg);
    TEST_MAIN_END("test_kernel_table");
}
