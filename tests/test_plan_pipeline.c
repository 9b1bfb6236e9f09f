/* mt_plan_pipeline_makespan, the planner's pipeline on shared cores:
 * with a core per rank it equals the pipeline checker's makespan (an
 * independent simulator: per-rank clocks, RECVs waiting for their message)
 * for 1F1B and interleaved schedules; with one core it is the whole work;
 * in between it lies between work / cores and the one-core-per-rank
 * makespan, and matches a hand-worked case (pp 4, m 4, 2 cores: 27). */
#include "parallel/pipeline_schedule.h"
#include "plan/plan.h"
#include "testlib.h"

int main(void) {
    for (int p = 2; p <= 6; p++)
        for (int m = 1; m <= 12; m++)
            for (int v = 1; v <= 2; v++) {
                if (v > 1 && m % p) continue; /* the interleaved schedule's rule */
                for (double bwd = 2; bwd <= 3; bwd++) {
                    mt_pp_schedule s;
                    mt_pp_sim sim;
                    mt_error err = {{0}};
                    CHECK(mt_pp_schedule_build(v > 1 ? MT_PP_INTERLEAVED : MT_PP_1F1B, p, m, v, &s, &err) == 0, "%s",
                          err.msg);
                    CHECK(mt_pp_check(&s, 1, bwd, 0, &sim, &err) == 0, "%s", err.msg);
                    double own = mt_plan_pipeline_makespan(p, m, v, p, bwd), work = (double)p * m * (1 + bwd);
                    CHECK_CLOSE(own, sim.makespan, 1e-9);
                    if (v == 1) CHECK_CLOSE(own, (m + p - 1) * (1 + bwd), 1e-9);
                    CHECK_CLOSE(mt_plan_pipeline_makespan(p, m, v, 1, bwd), work, 1e-9);
                    for (double c = 1.5; c < p; c += 0.5) {
                        double t = mt_plan_pipeline_makespan(p, m, v, c, bwd);
                        CHECK(t >= work / c - 1e-9 && t <= own * p / c + 1e-9, "p %d m %d v %d c %g: %g not in [%g, %g]",
                              p, m, v, c, t, work / c, own * p / c);
                    }
                    mt_pp_sim_free(&sim);
                    mt_pp_schedule_free(&s);
                }
            }
    /* worked by hand (and by a Python processor-sharing simulation): fill and drain leave a core idle */
    CHECK_CLOSE(mt_plan_pipeline_makespan(4, 4, 1, 2, 2), 27.0, 1e-9);
    CHECK(mt_plan_pipeline_makespan(0, 4, 1, 2, 2) < 0, "a pipeline of 0 stages is refused");
    TEST_MAIN_END("plan_pipeline");
}
