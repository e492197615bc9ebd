/* Two builds of libhalfstep side by side in one process, on its own team and on libgomp's threads,
 * beside DeepSpeed's AdamW loop shape under `omp parallel for`: AdamW f32 steps on one tensor, batches
 * of about 50 ms alternated, medians in µs per step (docs/DESIGN.md, "Parallel driver").
 *
 *   cc -O3 -march=native -fopenmp -Iinclude tools/pool_ab.c -o target/pool_ab -ldl -lm
 *   LIB_A=old/libhalfstep.so LIB_B=new/libhalfstep.so target/pool_ab ELEMENTS THREADS ALTERNATIONS GRAIN ENTRY...
 *
 * ENTRY is `a:t`, `b:t` (build A or B on a team of its own, hs_threads_calling_thread) or `a:o`, `b:o`
 * (on libgomp's threads, hs_threads_openmp); GRAIN 0 keeps the default. Each build is loaded with
 * RTLD_LOCAL, so both keep their own symbols and teams. NO_OPENMP_LOOP=1 leaves out the OpenMP loop,
 * whose threads otherwise spin beside the teams after each of its batches. The loop needs AVX-512F. */
#include <dlfcn.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "halfstep.h"

void GOMP_parallel(void (*fn)(void *), void *data, unsigned threads, unsigned flags);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* AdamW as DeepSpeedCPUAdam's loop computes it: eight vectors per iteration, one static range per
 * thread. Its bits are not halfstep's (no canonical NaNs, its own order of operations). */
static void openmp_adamw(float *p, const float *g, float *m, float *v, size_t n, int step) {
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 1e-2f;
    float bc1 = 1 - powf(b1, step), bc2 = 1 / sqrtf(1 - powf(b2, step));
    __m512 B1 = _mm512_set1_ps(b1), B2 = _mm512_set1_ps(b2), B1m = _mm512_set1_ps(1 - b1),
           B2m = _mm512_set1_ps(1 - b2), BS = _mm512_set1_ps(bc2), E = _mm512_set1_ps(eps),
           S = _mm512_set1_ps(-lr / bc1), W = _mm512_set1_ps(-lr * wd);
#pragma omp parallel for
    for (size_t i = 0; i < n; i += 128) {
        __m512 G[8], M[8], V[8], P[8];
        for (int k = 0; k < 8; k++) {
            G[k] = _mm512_loadu_ps(g + i + 16 * k);
            M[k] = _mm512_loadu_ps(m + i + 16 * k);
            V[k] = _mm512_loadu_ps(v + i + 16 * k);
            P[k] = _mm512_loadu_ps(p + i + 16 * k);
        }
        for (int k = 0; k < 8; k++) {
            M[k] = _mm512_fmadd_ps(G[k], B1m, _mm512_mul_ps(M[k], B1));
            V[k] = _mm512_fmadd_ps(_mm512_mul_ps(G[k], G[k]), B2m, _mm512_mul_ps(V[k], B2));
        }
        for (int k = 0; k < 8; k++) {
            __m512 d = _mm512_fmadd_ps(_mm512_sqrt_ps(V[k]), BS, E);
            P[k] = _mm512_fmadd_ps(P[k], W, P[k]);
            P[k] = _mm512_fmadd_ps(_mm512_div_ps(M[k], d), S, P[k]);
        }
        for (int k = 0; k < 8; k++) {
            _mm512_storeu_ps(p + i + 16 * k, P[k]);
            _mm512_storeu_ps(m + i + 16 * k, M[k]);
            _mm512_storeu_ps(v + i + 16 * k, V[k]);
        }
    }
}

typedef struct {
    hs_threads *(*calling_thread)(uint32_t);
    hs_threads *(*openmp)(hs_omp_parallel, hs_omp_count, hs_omp_count, uint32_t);
    hs_status (*set_grain)(hs_threads *, size_t);
    hs_status (*adam_step)(const hs_adam_config *, const hs_step_context *, hs_tensor *, size_t,
                           const hs_threads *);
    const char *(*last_error)(void);
} build;

static void load(build *b, const char *path) {
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) {
        fprintf(stderr, "pool_ab: %s\n", path ? dlerror() : "set LIB_A and LIB_B");
        exit(1);
    }
    b->calling_thread = (hs_threads * (*)(uint32_t)) dlsym(h, "hs_threads_calling_thread");
    b->openmp = (hs_threads * (*)(hs_omp_parallel, hs_omp_count, hs_omp_count, uint32_t))
        dlsym(h, "hs_threads_openmp");
    b->set_grain = (hs_status(*)(hs_threads *, size_t))dlsym(h, "hs_threads_set_grain");
    b->adam_step = (hs_status(*)(const hs_adam_config *, const hs_step_context *, hs_tensor *, size_t,
                                 const hs_threads *))dlsym(h, "hs_adam_step");
    b->last_error = (const char *(*)(void))dlsym(h, "hs_last_error");
    if (!b->calling_thread || !b->openmp || !b->set_grain || !b->adam_step || !b->last_error) {
        fprintf(stderr, "pool_ab: %s lacks an entry point\n", path);
        exit(1);
    }
}

/* A buffer `offset` bytes into a fresh page, as the PyTorch package places states (768-byte slots). */
static float *buffer(size_t n, size_t offset) {
    char *b = aligned_alloc(4096, 4 * n + 8192);
    if (!b) exit(1);
    memset(b, 0, 4 * n + 8192);
    return (float *)(b + offset);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { MAX_ENTRIES = 16, MAX_ALTERNATIONS = 64 };

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: pool_ab ELEMENTS THREADS ALTERNATIONS GRAIN ENTRY...\n");
        return 2;
    }
    size_t n = strtoull(argv[1], NULL, 10) / 128 * 128;
    int threads = atoi(argv[2]), alternations = atoi(argv[3]);
    size_t grain = strtoull(argv[4], NULL, 10);
    int entries = argc - 4; /* entry 0: the OpenMP loop; then argv[5..] */
    if (n == 0 || threads < 1 || alternations < 1 || alternations > MAX_ALTERNATIONS ||
        entries > MAX_ENTRIES) {
        fprintf(stderr, "pool_ab: ELEMENTS >= 128, THREADS >= 1, ALTERNATIONS 1..%d, at most %d entries\n",
                MAX_ALTERNATIONS, MAX_ENTRIES - 1);
        return 2;
    }
    int skip_openmp_loop = getenv("NO_OPENMP_LOOP") != NULL;
    build builds[2];
    load(&builds[0], getenv("LIB_A"));
    load(&builds[1], getenv("LIB_B"));
    omp_set_num_threads(threads);
    hs_threads *pools[2][2];
    for (int b = 0; b < 2; b++) {
        pools[b][0] = builds[b].calling_thread((uint32_t)threads);
        pools[b][1] = builds[b].openmp(GOMP_parallel, omp_get_thread_num, omp_get_max_threads,
                                       (uint32_t)threads);
        if (!pools[b][0] || !pools[b][1]) {
            fprintf(stderr, "pool_ab: %s\n", builds[b].last_error());
            return 1;
        }
        if (grain) {
            builds[b].set_grain(pools[b][0], grain);
            builds[b].set_grain(pools[b][1], grain);
        }
    }
    float *p[MAX_ENTRIES], *g[MAX_ENTRIES], *m[MAX_ENTRIES], *v[MAX_ENTRIES];
    for (int k = 0; k < entries; k++) {
        p[k] = buffer(n, 0);
        g[k] = buffer(n, 64);
        m[k] = buffer(n, 832);
        v[k] = buffer(n, 1600);
        for (size_t i = 0; i < n; i++) {
            p[k][i] = 0.5f + (float)(i % 977) * 1e-3f;
            g[k][i] = ((float)((i * 7919) % 1000) - 500.0f) * 1e-4f;
        }
    }
    hs_adam_config adamw = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, 1, 0, 0};
    int steps[MAX_ENTRIES] = {0};
    double us[MAX_ENTRIES][MAX_ALTERNATIONS];
    int reps = (int)(0.05 / ((double)n * 1e-9));
    if (reps < 50) reps = 50;
    /* Alternation -1 warms every entry up; each later one starts one entry further on. */
    for (int a = -1; a < alternations; a++) {
        for (int j = 0; j < entries; j++) {
            int k = (j + (a < 0 ? 0 : a)) % entries;
            if (k == 0 && skip_openmp_loop) continue;
            const char *spec = k ? argv[4 + k] : "openmp loop";
            int b = spec[0] == 'b', on_openmp = spec[2] == 'o';
            double t0 = now();
            for (int r = 0; r < reps; r++) {
                steps[k]++;
                if (k == 0) {
                    openmp_adamw(p[0], g[0], m[0], v[0], n, steps[0]);
                    continue;
                }
                hs_tensor t = {n, {HS_F32, 0, p[k], NULL}, {HS_F32, 0, g[k], NULL},
                               {{HS_F32, 0, m[k], NULL}, {HS_F32, 0, v[k], NULL}, {HS_F32, 0, NULL, NULL}},
                               0, 0};
                hs_step_context ctx = {1, (uint32_t)steps[k], HS_REPLICA_IDENTICAL};
                if (builds[b].adam_step(&adamw, &ctx, &t, 1, pools[b][on_openmp]) != HS_OK) {
                    fprintf(stderr, "pool_ab: %s\n", builds[b].last_error());
                    return 1;
                }
            }
            if (a >= 0) us[k][a] = (now() - t0) / reps * 1e6;
        }
    }
    for (int k = skip_openmp_loop ? 1 : 0; k < entries; k++) {
        qsort(us[k], (size_t)alternations, sizeof(double), by_value);
        printf("%zu elements, %d threads, grain %zu: %-11s median %8.2f us, fastest %8.2f\n", n, threads, grain,
               k ? argv[4 + k] : "openmp loop", us[k][alternations / 2], us[k][0]);
    }
    return 0;
}
