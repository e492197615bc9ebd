/* Steps on the process's OpenMP runtime (hs_threads_openmp), built with -fopenmp: a group of three
 * tensors, AdamW with bf16 stochastic weights and first moment, three steps, cut at the finest
 * grain, gives the same bytes on the runtime's threads (4 of them, and the runtime's own count) as on
 * the calling thread alone, also when stepped from the threads of a parallel region at once. The
 * runtime is asked for a team of several threads, and NULL entry points are refused with a
 * message. Exit status 0 only if all hold. */
#include "halfstep.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* libgomp's entry point (LLVM's and Intel's runtimes export it too); omp.h does not declare it. */
void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags);

#define TENSORS 3
static const size_t LEN[TENSORS] = {50000, 70001, 3000};
#define TOTAL (50000 + 70001 + 3000)

typedef struct {
    uint16_t w[TOTAL], m[TOTAL];
    float v[TOTAL], g[TOTAL];
} group;

static int failures = 0;
static unsigned largest_team = 0;

/* GOMP_parallel, noting the largest team asked for. */
static void counting_parallel(void (*fn)(void *), void *data, unsigned threads, unsigned flags) {
#pragma omp critical
    if (threads > largest_team) largest_team = threads;
    GOMP_parallel(fn, data, threads, flags);
}

static void init(group *d) {
    for (size_t i = 0; i < TOTAL; i++) {
        d->w[i] = (uint16_t)(0x3c00 + i % 97); /* bf16 values around 0.0078 */
        d->m[i] = 0;
        d->v[i] = 0.0f;
    }
}

static void run(group *d, const hs_threads *threads) {
    hs_adam_config adamw = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, 1, 0, 0};
    for (uint32_t step = 1; step <= 3; step++) {
        hs_step_context ctx = {11, step, HS_REPLICA_IDENTICAL};
        hs_tensor t[TENSORS];
        size_t at = 0;
        for (int k = 0; k < TENSORS; k++) {
            for (size_t i = at; i < at + LEN[k]; i++) d->g[i] = (float)((int)((i * 7 + step) % 23) - 11) * 0.01f;
            memset(&t[k], 0, sizeof t[k]);
            t[k].len = LEN[k];
            t[k].weights = (hs_buffer){HS_BF16, HS_STOCHASTIC, d->w + at, NULL};
            t[k].grads = (hs_buffer){HS_F32, 0, d->g + at, NULL};
            t[k].state[0] = (hs_buffer){HS_BF16, HS_STOCHASTIC, d->m + at, NULL};
            t[k].state[1] = (hs_buffer){HS_F32, 0, d->v + at, NULL};
            t[k].state[2] = (hs_buffer){HS_F32, 0, NULL, NULL};
            t[k].stream_id = (uint32_t)k;
            t[k].index_base = 0;
            at += LEN[k];
        }
        hs_status st = hs_adam_step(&adamw, &ctx, t, TENSORS, threads);
        if (st != HS_OK) {
            fprintf(stderr, "openmp: hs_adam_step: status %d: %s\n", (int)st, hs_last_error());
            exit(1);
        }
    }
}

static void same(const group *a, const group *b, const char *what) {
    if (memcmp(a->w, b->w, sizeof a->w) || memcmp(a->m, b->m, sizeof a->m) || memcmp(a->v, b->v, sizeof a->v)) {
        fprintf(stderr, "openmp: %s: not the bytes of the calling thread alone\n", what);
        failures++;
    }
}

static hs_threads *on_openmp(uint32_t n) {
    hs_threads *t = hs_threads_openmp(counting_parallel, omp_get_thread_num, omp_get_max_threads, n);
    if (!t) {
        fprintf(stderr, "openmp: hs_threads_openmp(%u): %s\n", n, hs_last_error());
        exit(1);
    }
    if (hs_threads_set_grain(t, 1) != HS_OK) {
        fprintf(stderr, "openmp: hs_threads_set_grain: %s\n", hs_last_error());
        exit(1);
    }
    return t;
}

int main(void) {
    static group alone, got, each[3];
    hs_threads *one = hs_threads_new(1);
    init(&alone);
    run(&alone, one);
    hs_threads_free(one);

    hs_threads *four = on_openmp(4), *own_count = on_openmp(0);
    init(&got);
    run(&got, four);
    same(&alone, &got, "4 threads");
    if (largest_team < 2) {
        fprintf(stderr, "openmp: a team of %u thread(s) asked for, not several\n", largest_team);
        failures++;
    }
    omp_set_num_threads(3);
    init(&got);
    run(&got, own_count);
    same(&alone, &got, "the runtime's count (3)");

    /* Three steps at once, each from a thread of a region (each then on a team of its own, or of one
     * thread where the runtime does not nest). */
#pragma omp parallel for num_threads(3) schedule(static, 1)
    for (int k = 0; k < 3; k++) {
        init(&each[k]);
        run(&each[k], four);
    }
    for (int k = 0; k < 3; k++) same(&alone, &each[k], "stepped from a thread of a parallel region");
    hs_threads_free(four);
    hs_threads_free(own_count);

    if (hs_threads_openmp(NULL, omp_get_thread_num, omp_get_max_threads, 4) != NULL ||
        strlen(hs_last_error()) == 0 ||
        hs_threads_openmp(counting_parallel, omp_get_thread_num, omp_get_max_threads, HS_MAX_THREADS + 1) != NULL) {
        fprintf(stderr, "openmp: a NULL entry point or too many threads was not refused with a message\n");
        failures++;
    }
    if (failures == 0) printf("openmp: same bytes on the OpenMP runtime's threads as on one thread\n");
    return failures != 0;
}
