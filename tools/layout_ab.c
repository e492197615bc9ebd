/* Optimizer steps of two builds of libhalfstep and of several storage layouts side by side in one
 * process, on the calling thread: short batches (about 4 ms) alternated hundreds of times, each
 * entry's time per alternation over the first entry's in the same alternation, medians and quartiles
 * of those ratios. On a VM whose speed moves 20% from run to run (criterion's medians of separate
 * runs), a ratio per alternation of a few milliseconds holds to about 1% (docs/DESIGN.md, "Measuring on
 * a noisy VM").
 *
 *   cc -O2 -Iinclude tools/layout_ab.c -o target/layout_ab -ldl
 *   LIB_A=old/libhalfstep.so LIB_B=new/libhalfstep.so target/layout_ab ELEMENTS ALTERNATIONS ENTRY...
 *
 * ENTRY is `BUILD:OPTIMIZER:LAYOUT`: BUILD `a` or `b`; OPTIMIZER `sgd` (with momentum), `adagrad`,
 * `adamw`, `amsgrad` (AdamW with `amsgrad`) or `lamb`; LAYOUT as the kernel bench's `sr_*` rows:
 * `split` (split weights, bf16 gradients, f32 states), `states` (split weights, bf16 gradients,
 * bf16 states rounded stochastically), `weights` (bf16 weights rounded stochastically, bf16
 * gradients, f32 states), `nearest` and `nearest_sr` (bf16 weights rounded to nearest, bf16
 * gradients, f32 states or bf16 states rounded stochastically), `f32` (every buffer f32), `f32_sr`
 * (f32 weights and gradients, bf16 states rounded stochastically), `bf16_sr` (bf16 weights and
 * states rounded stochastically, bf16 gradients), `master` (f32 weights and states, bf16 gradients)
 * or `runtime` (bf16 weights and states rounded stochastically, f32 gradients: a combination the
 * library accesses at run time, not compiled as a layout of its own).
 * Buffers are placed as the PyTorch package places them. HALFSTEP_BACKEND picks the backend of both
 * builds. Each build is loaded with RTLD_LOCAL, so the two keep their own symbols.
 *
 * On x86 a probe of the core's FMA throughput runs before each alternation and after each entry's
 * batch. It slows with a lower clock and with another thread on the core's ports: on a VM whose core
 * another tenant shares at times, a loop that issues on every port slows in those stretches while one
 * the divider bounds does not, so the ratio of the two moves with the neighbour. The last column
 * gives the ratios' median over the alternations at full speed: those whose slowest probe ran within
 * 4% of the quietest alternation's (docs/DESIGN.md, "Measuring on a noisy VM"). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "halfstep.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Nanoseconds per 256-bit FMA over eight independent chains: two issue a cycle on a core of the Intel
 * and AMD CPUs the library targets that runs nothing else. 0 where the CPU has no FMA (no probe). */
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static double fma_probe_avx2(void) {
    __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a0 = _mm256_set1_ps(1.0f), a1 = _mm256_set1_ps(1.1f), a2 = _mm256_set1_ps(1.2f);
    __m256 a3 = _mm256_set1_ps(1.3f), a4 = _mm256_set1_ps(1.4f), a5 = _mm256_set1_ps(1.5f);
    __m256 a6 = _mm256_set1_ps(1.6f), a7 = _mm256_set1_ps(1.7f);
    enum { ROUNDS = 20000 };
    double t0 = now();
    for (int r = 0; r < ROUNDS; r++) {
        a0 = _mm256_fmadd_ps(a0, m, c);
        a1 = _mm256_fmadd_ps(a1, m, c);
        a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c);
        a4 = _mm256_fmadd_ps(a4, m, c);
        a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c);
        a7 = _mm256_fmadd_ps(a7, m, c);
    }
    double t = now() - t0;
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    float out[8];
    _mm256_storeu_ps(out, s);
    if (out[0] != out[0]) exit(1); /* keeps the chains */
    return t / (8.0 * ROUNDS) * 1e9;
}
#endif

static double fma_probe(void) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("fma")) return fma_probe_avx2();
#endif
    return 0;
}

typedef struct {
    hs_status (*sgd)(const hs_sgd_config *, const hs_step_context *, hs_tensor *, size_t,
                     const hs_threads *);
    hs_status (*adagrad)(const hs_adagrad_config *, const hs_step_context *, hs_tensor *, size_t,
                         const hs_threads *);
    hs_status (*adam)(const hs_adam_config *, const hs_step_context *, hs_tensor *, size_t,
                      const hs_threads *);
    hs_status (*lamb)(const hs_lamb_config *, const hs_step_context *, hs_tensor *, size_t,
                      const hs_threads *, hs_lamb_workspace *);
    hs_lamb_workspace *workspace;
    /* A team of the calling thread alone: NULL would step on the global pool, which cuts a step
     * over more than 65536 elements across every CPU the process may run on. */
    hs_threads *team;
    const char *(*last_error)(void);
} build;

static void load(build *b, const char *path) {
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) {
        fprintf(stderr, "layout_ab: %s\n", path ? dlerror() : "set LIB_A and LIB_B");
        exit(1);
    }
    *(void **)&b->sgd = dlsym(h, "hs_sgd_step");
    *(void **)&b->adagrad = dlsym(h, "hs_adagrad_step");
    *(void **)&b->adam = dlsym(h, "hs_adam_step");
    *(void **)&b->lamb = dlsym(h, "hs_lamb_step");
    *(void **)&b->last_error = dlsym(h, "hs_last_error");
    hs_lamb_workspace *(*workspace_new)(void);
    *(void **)&workspace_new = dlsym(h, "hs_lamb_workspace_new");
    hs_threads *(*calling_thread)(uint32_t);
    *(void **)&calling_thread = dlsym(h, "hs_threads_calling_thread");
    if (!b->sgd || !b->adagrad || !b->adam || !b->lamb || !b->last_error || !workspace_new ||
        !calling_thread) {
        fprintf(stderr, "layout_ab: %s lacks an entry point\n", path);
        exit(1);
    }
    b->workspace = workspace_new();
    b->team = calling_thread(1);
    if (!b->workspace || !b->team) {
        fprintf(stderr, "layout_ab: %s\n", b->last_error());
        exit(1);
    }
}

/* The `slot`-th buffer of a tensor: `slot * 768` bytes into a page, and from 4 MiB on `slot` whole
 * pages further into a buffer that many pages longer, as the PyTorch package places them. */
static void *buffer(size_t bytes, int slot) {
    size_t offset = (size_t)slot * 768 + (bytes >= (4u << 20) ? (size_t)slot * 4096 : 0);
    char *b = aligned_alloc(4096, (bytes + offset + 4095) / 4096 * 4096);
    if (!b) exit(1);
    return b + offset;
}

static uint16_t *bf16_buffer(size_t n, int slot, uint16_t first, unsigned spread) {
    uint16_t *b = buffer(2 * n, slot);
    for (size_t i = 0; i < n; i++) b[i] = (uint16_t)(first + i % spread);
    return b;
}

static float *f32_buffer(size_t n, int slot, float first, float step) {
    float *b = buffer(4 * n, slot);
    for (size_t i = 0; i < n; i++) b[i] = first + step * (float)(i % 53);
    return b;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { MAX_ENTRIES = 16, MAX_ALTERNATIONS = 4001 };

typedef struct {
    int build, optimizer; /* optimizer: 0 sgd, 1 adagrad, 2 adamw, 3 lamb, 4 adamw with amsgrad */
    hs_tensor tensor;
    uint32_t step;
} entry;

static int parse(entry *e, const char *spec, size_t n) {
    static const char *optimizers[] = {"sgd", "adagrad", "adamw", "lamb", "amsgrad"};
    char opt[16], layout[16];
    if (sscanf(spec, "%1[ab]:%15[a-z0-9]:%15s", (char[2]){0}, opt, layout) != 3) return 0;
    e->build = spec[0] == 'b';
    e->optimizer = -1;
    for (int k = 0; k < 5; k++)
        if (!strcmp(opt, optimizers[k])) e->optimizer = k;
    int f32_sr = !strcmp(layout, "f32_sr"), bf16_sr = !strcmp(layout, "bf16_sr");
    int f32 = f32_sr || !strcmp(layout, "f32"), split = !strcmp(layout, "split");
    int states = f32_sr || bf16_sr || !strcmp(layout, "states");
    int weights = bf16_sr || !strcmp(layout, "weights");
    int runtime = !strcmp(layout, "runtime"), master = !strcmp(layout, "master");
    int nearest_sr = !strcmp(layout, "nearest_sr"), nearest = nearest_sr || !strcmp(layout, "nearest");
    if (e->optimizer < 0 || !(f32 || split || states || weights || runtime || master || nearest)) return 0;
    states |= runtime || nearest_sr;
    weights |= runtime || nearest;
    memset(&e->tensor, 0, sizeof e->tensor);
    hs_tensor *t = &e->tensor;
    t->len = n;
    t->stream_id = 3;
    int slot = 0;
    if (f32 || master) {
        t->weights = (hs_buffer){HS_F32, 0, f32_buffer(n, slot++, 0.5f, 1e-3f), NULL};
        t->grads = master ? (hs_buffer){HS_BF16, 0, bf16_buffer(n, slot++, 0x3a00, 89), NULL}
                          : (hs_buffer){HS_F32, 0, f32_buffer(n, slot++, -0.02f, 1e-3f), NULL};
    } else {
        if (weights)
            t->weights = (hs_buffer){HS_BF16, nearest ? HS_NEAREST_EVEN : HS_STOCHASTIC,
                                     bf16_buffer(n, slot++, 0x3f00, 97), NULL};
        else {
            uint16_t *top = bf16_buffer(n, slot++, 0x3f00, 97);
            t->weights = (hs_buffer){HS_SPLIT, 0, top, bf16_buffer(n, slot++, 0x1234, 4099)};
        }
        t->grads = runtime ? (hs_buffer){HS_F32, 0, f32_buffer(n, slot++, -0.02f, 1e-3f), NULL}
                           : (hs_buffer){HS_BF16, 0, bf16_buffer(n, slot++, 0x3a00, 89), NULL};
    }
    int count = e->optimizer < 2 ? 1 : e->optimizer == 4 ? 3 : 2;
    for (int s = 0; s < count; s++)
        t->state[s] = states ? (hs_buffer){HS_BF16, HS_STOCHASTIC, bf16_buffer(n, slot++, 0x3800, 53), NULL}
                             : (hs_buffer){HS_F32, 0, f32_buffer(n, slot++, 1e-3f, 1e-4f), NULL};
    e->step = 0;
    return 1;
}

static void step(const build *b, entry *e) {
    /* The kernel bench's hyperparameters (torch.optim's defaults but SGD's momentum). */
    static const hs_sgd_config sgd = {1e-3f, 0.9f, 0.0f, 0.0f, 0, 0};
    static const hs_adagrad_config adagrad = {1e-2f, 0.0f, 0.0f, 1e-10f, 0.0f, 0};
    static const hs_adam_config adamw = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, 1, 0, 0};
    static const hs_adam_config amsgrad = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, 1, 1, 0};
    static const hs_lamb_config lamb = {1e-3f, 0.9f, 0.999f, 1e-6f, 1e-2f, 0.0f};
    hs_step_context ctx = {42, ++e->step, HS_REPLICA_IDENTICAL};
    hs_status s = e->optimizer == 0   ? b->sgd(&sgd, &ctx, &e->tensor, 1, b->team)
                  : e->optimizer == 1 ? b->adagrad(&adagrad, &ctx, &e->tensor, 1, b->team)
                  : e->optimizer == 2 ? b->adam(&adamw, &ctx, &e->tensor, 1, b->team)
                  : e->optimizer == 4 ? b->adam(&amsgrad, &ctx, &e->tensor, 1, b->team)
                                      : b->lamb(&lamb, &ctx, &e->tensor, 1, b->team, b->workspace);
    if (s != HS_OK) {
        fprintf(stderr, "layout_ab: %s\n", b->last_error());
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: layout_ab ELEMENTS ALTERNATIONS ENTRY...\n");
        return 2;
    }
    size_t n = strtoull(argv[1], NULL, 10);
    int alternations = atoi(argv[2]), entries = argc - 3;
    if (n == 0 || alternations < 1 || alternations > MAX_ALTERNATIONS || entries > MAX_ENTRIES) {
        fprintf(stderr, "layout_ab: ELEMENTS >= 1, ALTERNATIONS 1..%d, at most %d entries\n",
                MAX_ALTERNATIONS, MAX_ENTRIES);
        return 2;
    }
    build builds[2];
    load(&builds[0], getenv("LIB_A"));
    load(&builds[1], getenv("LIB_B"));
    entry e[MAX_ENTRIES];
    for (int k = 0; k < entries; k++)
        if (!parse(&e[k], argv[3 + k], n)) {
            fprintf(stderr, "layout_ab: bad entry %s\n", argv[3 + k]);
            return 2;
        }
    /* Steps per batch: about 4 ms of the first entry, measured after a warm-up step of every entry
     * (the first step of a large buffer takes its page faults: timed, it made the batch one step). */
    for (int k = 0; k < entries; k++) step(&builds[e[k].build], &e[k]);
    int reps = 1;
    for (;;) {
        double t0 = now();
        for (int r = 0; r < reps; r++) step(&builds[e[0].build], &e[0]);
        if (now() - t0 > 4e-3) break;
        reps *= 2;
    }
    static double ns[MAX_ENTRIES][MAX_ALTERNATIONS], ratio[MAX_ENTRIES][MAX_ALTERNATIONS];
    /* The slowest probe of each alternation. */
    static double probe[MAX_ALTERNATIONS];
    /* Alternation -1 warms every entry up; each later one starts one entry further on. */
    for (int a = -1; a < alternations; a++) {
        double slowest = fma_probe();
        for (int j = 0; j < entries; j++) {
            int k = (j + (a < 0 ? 0 : a)) % entries;
            double t0 = now();
            for (int r = 0; r < reps; r++) step(&builds[e[k].build], &e[k]);
            if (a >= 0) ns[k][a] = (now() - t0) / reps / (double)n * 1e9;
            double p = fma_probe();
            slowest = p > slowest ? p : slowest;
        }
        if (a >= 0) {
            probe[a] = slowest;
            for (int k = 0; k < entries; k++) ratio[k][a] = ns[k][a] / ns[0][a];
        }
    }
    /* The alternations at full speed: those whose slowest probe ran within 4% of the quietest
     * alternation's. A whole alternation, not the run's one fastest probe: after AVX-512 batches a
     * 256-bit probe may run a clock step lower than after AVX2 ones. */
    double quietest = 1e30;
    for (int a = 0; a < alternations; a++) quietest = probe[a] < quietest ? probe[a] : quietest;
    static double full_speed[MAX_ENTRIES][MAX_ALTERNATIONS];
    int full = 0;
    for (int a = 0; a < alternations; a++)
        if (quietest > 0 && probe[a] <= 1.04 * quietest) {
            for (int k = 0; k < entries; k++) full_speed[k][full] = ratio[k][a];
            full++;
        }
    printf("%zu elements, %d alternations of %d steps; ratio: over %s in the same alternation\n", n,
           alternations, reps, argv[3]);
    if (quietest > 0)
        printf("FMA probe: %.4f ns in the quietest alternation; %d of %d alternations at full speed (within 4%%)\n",
               quietest, full, alternations);
    printf("| entry | ns/elem, median | fastest | ratio, median | quartiles | ratio, full speed |\n"
           "|---|---|---|---|---|---|\n");
    for (int k = 0; k < entries; k++) {
        qsort(ns[k], (size_t)alternations, sizeof(double), by_value);
        qsort(ratio[k], (size_t)alternations, sizeof(double), by_value);
        qsort(full_speed[k], (size_t)full, sizeof(double), by_value);
        printf("| %s | %.4f | %.4f | %.3f | %.3f-%.3f | ", argv[3 + k], ns[k][alternations / 2], ns[k][0],
               ratio[k][alternations / 2], ratio[k][alternations / 4], ratio[k][3 * alternations / 4]);
        if (full) printf("%.3f |\n", full_speed[k][full / 2]);
        else printf("- |\n");
    }
    return 0;
}
