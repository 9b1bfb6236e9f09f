/* Sampling from next-token logits (the decode step itself is the model
 * family's: models/decode.h). */
#include "train/generate.h"
#include "core/error.h"
#include "core/philox.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int32_t mt_sample(const float *logits, int V, float temperature, int top_k, uint64_t seed, uint64_t index,
                  float *work) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0.0f) return best;
    float thr = -INFINITY;
    if (top_k > 0 && top_k < V) {
        /* k-th largest logit by partial selection over a copy */
        memcpy(work, logits, (size_t)V * sizeof(float));
        int lo = 0, hi = V - 1, k = top_k - 1;
        while (lo < hi) {
            float pivot = work[(lo + hi) / 2];
            int i = lo, j = hi;
            while (i <= j) {
                while (work[i] > pivot) i++;
                while (work[j] < pivot) j--;
                if (i <= j) { float tmp = work[i]; work[i] = work[j]; work[j] = tmp; i++; j--; }
            }
            if (k <= j) hi = j;
            else if (k >= i) lo = i;
            else break;
        }
        thr = work[k];
    }
    double sum = 0;
    float mx = logits[best];
    for (int i = 0; i < V; i++) sum += logits[i] >= thr ? exp((logits[i] - mx) / temperature) : 0.0;
    mt_u32x4 r = mt_philox4x32((uint32_t)index, (uint32_t)(index >> 32), 0x53414D50u, 0, (uint32_t)seed,
                               (uint32_t)(seed >> 32));
    double u = ((double)r.v[0] + 0.5) / 4294967296.0 * sum, acc = 0;
    for (int i = 0; i < V; i++) {
        if (logits[i] < thr) continue;
        acc += exp((logits[i] - mx) / temperature);
        if (acc >= u) return i;
    }
    return best;
}
