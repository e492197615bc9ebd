/* A step's rate per core with every core stepping: each thread, pinned to a CPU of its own, steps a
 * piece of its own (one tensor, the calling thread's team) at once with the others, repeatedly.
 * Timed per thread, not through the library's pool, so neither the hand-off nor a slow vCPU's share
 * of the pieces enters a thread's figure. With pieces that fit the L2 the figure is the loop's own
 * rate at that thread count (its clock, its ports, the divider); with larger pieces it adds what the
 * L3 or memory costs it. Set beside the copy roof of `benches/parallel.rs` on the same host, it tells
 * whether a many-thread step is held by its traffic or by its loop. Per repetition it also takes the
 * slowest thread's time (a step cut into one piece per thread ends then) and the threads' mean (one
 * whose pieces went out by the threads' speed), and last it steps the same elements as one tensor
 * on a team of THREADS, as a program does: what the pool and its pieces add.
 *
 *   cc -O2 -pthread -Iinclude tools/piece_probe.c -o target/piece_probe -ldl
 *   LIB=target/release/libhalfstep.so target/piece_probe THREADS ELEMENTS REPS OPTIMIZER:LAYOUT [CALLS]
 *
 * OPTIMIZER `adagrad` or `sgd` (with momentum); LAYOUT `split` (split weights, bf16 gradients, one
 * f32 state: 18 bytes per element) or `f32` (20); or `adamw:f32` (AdamW, f32 weights, gradients and
 * both moments: 28 bytes per element). ELEMENTS is the whole step's; each thread takes
 * ELEMENTS / THREADS, and steps it in CALLS calls of equal parts one after another (default 1; a
 * team cuts a 4M step on 16 threads into 128 pieces, eight per member). Thread t runs on CPU
 * (FIRST_CPU + t) mod the CPU count (FIRST_CPU, default 0). VEC_PLACE set: the split layout's
 * buffers placed as `benches/parallel.rs` places them, not in one allocation.
 * x86 only (the spinning barrier pauses with `_mm_pause`). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "halfstep.h"

enum { MAX_THREADS = 256 };

static int threads, reps, first_cpu, adagrad, adamw, split, calls = 1;
static size_t piece;
static double *times; /* [rep][thread], seconds */
static hs_status (*sgd_step)(const hs_sgd_config *, const hs_step_context *, hs_tensor *, size_t,
                             const hs_threads *);
static hs_status (*adagrad_step)(const hs_adagrad_config *, const hs_step_context *, hs_tensor *,
                                 size_t, const hs_threads *);
static hs_status (*adam_step)(const hs_adam_config *, const hs_step_context *, hs_tensor *, size_t,
                              const hs_threads *);
static hs_threads *(*calling_thread)(uint32_t);
static const char *(*last_error)(void);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* A spinning barrier: a futex wake-up would add tens of microseconds of skew between threads. */
static int arrived, generation;
static void barrier(void) {
    int g = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&arrived, 1, __ATOMIC_ACQ_REL) == threads) {
        __atomic_store_n(&arrived, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&generation, g + 1, __ATOMIC_RELEASE);
    } else {
        while (__atomic_load_n(&generation, __ATOMIC_ACQUIRE) == g) _mm_pause();
    }
}

/* One allocation per tensor, each buffer a page and `slot * 768` bytes apart: no two streams share
 * the low 12 bits of their addresses (a load would falsely wait on a store to another buffer). */
static void *place(char **next, size_t bytes, int slot) {
    char *p = *next + (size_t)slot * 768;
    *next = p + (bytes + 4095) / 4096 * 4096 + 4096;
    return p;
}

/* `bytes` and 64 KiB more, page-aligned; exits if there is no memory. */
static char *region(size_t bytes) {
    char *p = aligned_alloc(4096, (bytes + 8 * 8192 + 4095) / 4096 * 4096);
    if (!p) exit(1);
    return p;
}

static int vec_place;
/* VEC_PLACE: as `benches/parallel.rs` places them: the weights' top and the gradients each an
 * allocation of their own, 16 bytes into a page; the trail (slot 4) and the state (slot 1)
 * `slot * 768` bytes past the top's offset in its page, and from 4 MiB `slot` pages further. */
static void *vplace(size_t bytes, int slot) {
    char *p = region(bytes + 8 * 4096);
    size_t large = bytes >= (4u << 20) ? (size_t)slot * 4096 : 0;
    return p + (16 + (size_t)slot * 768) % 4096 + large;
}

/* Where buffer `slot` of a tensor goes: its place in the tensor's one allocation, or with VEC_PLACE
 * the bench's slot `bench_slot`. */
static void *buffer(char **next, size_t bytes, int slot, int bench_slot) {
    return vec_place ? vplace(bytes, bench_slot) : place(next, bytes, slot);
}

/* A tensor of `n` elements in the probe's layout, its buffers in one allocation (or as VEC_PLACE
 * says); exits if there is no memory. */
static hs_tensor make_tensor(size_t n) {
    char *next = vec_place ? NULL : region(n * 20);
    hs_tensor tensor;
    memset(&tensor, 0, sizeof tensor);
    tensor.len = n;
    tensor.stream_id = 3;
    if (split) {
        uint16_t *top = buffer(&next, 2 * n, 0, 0), *trail = buffer(&next, 2 * n, 1, 4);
        uint16_t *grads = buffer(&next, 2 * n, 2, 0);
        for (size_t i = 0; i < n; i++) {
            top[i] = (uint16_t)(0x3f00 + i % 97);
            trail[i] = (uint16_t)(0x1234 + i % 4099);
            grads[i] = (uint16_t)(0x3a00 + i % 89);
        }
        tensor.weights = (hs_buffer){HS_SPLIT, 0, top, trail};
        tensor.grads = (hs_buffer){HS_BF16, 0, grads, NULL};
    } else {
        float *weights = buffer(&next, 4 * n, 0, 0), *grads = buffer(&next, 4 * n, 1, 0);
        for (size_t i = 0; i < n; i++) {
            weights[i] = 0.5f + 1e-3f * (float)(i % 53);
            grads[i] = -0.02f + 1e-3f * (float)(i % 47);
        }
        tensor.weights = (hs_buffer){HS_F32, 0, weights, NULL};
        tensor.grads = (hs_buffer){HS_F32, 0, grads, NULL};
    }
    float *state = buffer(&next, 4 * n, 3, 1);
    for (size_t i = 0; i < n; i++) state[i] = 1e-3f + 1e-4f * (float)(i % 53);
    tensor.state[0] = (hs_buffer){HS_F32, 0, state, NULL};
    if (adamw) {
        float *second = buffer(&next, 4 * n, 4, 2);
        for (size_t i = 0; i < n; i++) second[i] = 1e-6f + 1e-7f * (float)(i % 61);
        tensor.state[1] = (hs_buffer){HS_F32, 0, second, NULL};
    }
    return tensor;
}

static const hs_sgd_config sgd = {1e-3f, 0.9f, 0.0f, 0.0f, 0, 0};
static const hs_adagrad_config ada = {1e-2f, 0.0f, 0.0f, 1e-10f, 0.0f, 0};
static const hs_adam_config adam = {1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, 1, 0, 0};

/* One step of `tensor` on `team`; exits with the library's message if it fails. */
static void step(hs_tensor *tensor, uint64_t n, hs_threads *team) {
    hs_step_context ctx = {42, n, HS_REPLICA_IDENTICAL};
    hs_status st = adamw     ? adam_step(&adam, &ctx, tensor, 1, team)
                   : adagrad ? adagrad_step(&ada, &ctx, tensor, 1, team)
                             : sgd_step(&sgd, &ctx, tensor, 1, team);
    if (st != HS_OK) {
        fprintf(stderr, "piece_probe: %s\n", last_error());
        exit(1);
    }
}

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((first_cpu + t) % (cpus > 0 ? cpus : 1), &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
        fprintf(stderr, "piece_probe: thread %d cannot run on CPU %ld alone\n", t,
                (first_cpu + t) % (cpus > 0 ? cpus : 1));
        exit(1);
    }
    size_t n = piece;
    hs_tensor tensor = make_tensor(n);

    /* A team of the calling thread alone: NULL would step on the global pool. */
    hs_threads *team = calling_thread(1);
    if (!team) {
        fprintf(stderr, "piece_probe: %s\n", last_error());
        exit(1);
    }
    for (int r = 0; r < reps; r++) {
        barrier();
        double t0 = now();
        for (int c = 0; c < calls; c++) {
            hs_tensor part = tensor;
            size_t len = n / calls, at = (size_t)c * len;
            part.len = len;
            part.index_base = at;
            hs_buffer *b[] = {&part.weights, &part.grads, &part.state[0], &part.state[1]};
            for (int k = 0; k < 3 + adamw; k++) {
                size_t bytes = b[k]->kind == HS_F32 ? 4 : 2;
                b[k]->data = (char *)b[k]->data + at * bytes;
                if (b[k]->trail) b[k]->trail += at;
            }
            step(&part, (uint64_t)r + 1, team);
        }
        times[(size_t)r * threads + t] = now() - t0;
    }
    return NULL;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    char opt[16], layout[16];
    if ((argc != 5 && argc != 6) || sscanf(argv[4], "%15[a-z]:%15s", opt, layout) != 2) {
        fprintf(stderr, "usage: LIB=libhalfstep.so %s THREADS ELEMENTS REPS OPTIMIZER:LAYOUT [CALLS]\n",
                argv[0]);
        return 2;
    }
    threads = atoi(argv[1]);
    size_t elements = strtoull(argv[2], NULL, 10);
    reps = atoi(argv[3]);
    adagrad = !strcmp(opt, "adagrad");
    adamw = !strcmp(opt, "adamw");
    split = !strcmp(layout, "split");
    if (threads < 1 || threads > MAX_THREADS || reps < 1 ||
        (!adagrad && !adamw && strcmp(opt, "sgd")) || (!split && strcmp(layout, "f32")) ||
        (adamw && split)) {
        fprintf(stderr, "piece_probe: 1-%d threads, REPS >= 1, adagrad|sgd : split|f32, adamw:f32\n",
                MAX_THREADS);
        return 2;
    }
    if (argc == 6) calls = atoi(argv[5]);
    if (calls < 1) {
        fprintf(stderr, "piece_probe: CALLS >= 1\n");
        return 2;
    }
    piece = elements / threads / (16 * (size_t)calls) * 16 * calls;
    if (piece == 0) {
        fprintf(stderr, "piece_probe: ELEMENTS gives each thread fewer than 16\n");
        return 2;
    }
    first_cpu = getenv("FIRST_CPU") ? atoi(getenv("FIRST_CPU")) : 0;
    vec_place = getenv("VEC_PLACE") && split;
    const char *path = getenv("LIB");
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h) {
        fprintf(stderr, "piece_probe: %s\n", path ? dlerror() : "set LIB");
        return 1;
    }
    *(void **)&sgd_step = dlsym(h, "hs_sgd_step");
    *(void **)&adagrad_step = dlsym(h, "hs_adagrad_step");
    *(void **)&adam_step = dlsym(h, "hs_adam_step");
    *(void **)&calling_thread = dlsym(h, "hs_threads_calling_thread");
    *(void **)&last_error = dlsym(h, "hs_last_error");
    if (!sgd_step || !adagrad_step || !adam_step || !calling_thread || !last_error) {
        fprintf(stderr, "piece_probe: %s lacks an entry point\n", path);
        return 1;
    }
    times = calloc((size_t)reps * threads, sizeof(double));
    if (!times) return 1;
    pthread_t th[MAX_THREADS];
    for (int t = 0; t < threads; t++) pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);

    /* Per thread: the median over the repetitions, ns per element of its piece. */
    double per[MAX_THREADS], sorted[MAX_THREADS];
    double *x = malloc(reps * sizeof(double));
    if (!x) return 1;
    for (int t = 0; t < threads; t++) {
        for (int r = 0; r < reps; r++) x[r] = times[(size_t)r * threads + t];
        qsort(x, reps, sizeof(double), by_value);
        per[t] = sorted[t] = x[reps / 2] / piece * 1e9;
    }
    qsort(sorted, threads, sizeof(double), by_value);
    printf("%s:%s, %d threads, %zu elements each in %d calls, %d repetitions; ns per element of a "
           "thread's piece, medians over the repetitions\n",
           opt, layout, threads, piece, calls, reps);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    for (int t = 0; t < threads; t++)
        printf("thread %d (CPU %ld): %.4f\n", t, (first_cpu + t) % (cpus > 0 ? cpus : 1), per[t]);
    printf("threads' median / fastest / slowest: %.4f / %.4f / %.4f\n", sorted[threads / 2],
           sorted[0], sorted[threads - 1]);

    /* Per repetition: the slowest thread's time (a step of these pieces, one per thread, ends
     * then) and the threads' mean (a step whose pieces went to the threads by their speed). */
    double *slowest = malloc(reps * sizeof(double)), *mean = malloc(reps * sizeof(double));
    if (!slowest || !mean) return 1;
    for (int r = 0; r < reps; r++) {
        slowest[r] = mean[r] = 0;
        for (int t = 0; t < threads; t++) {
            double y = times[(size_t)r * threads + t];
            slowest[r] = y > slowest[r] ? y : slowest[r];
            mean[r] += y / threads;
        }
    }
    qsort(slowest, reps, sizeof(double), by_value);
    qsort(mean, reps, sizeof(double), by_value);
    printf("a step of %zu elements, us, medians over the repetitions: slowest thread's piece %.1f, "
           "threads' mean %.1f\n",
           piece * threads, slowest[reps / 2] * 1e6, mean[reps / 2] * 1e6);

    /* The same elements as one tensor stepped by a team of THREADS (the calling thread and the
     * team's own, unpinned), as a program steps it: what the pool adds to the pieces' times. */
    hs_threads *team = calling_thread((uint32_t)threads);
    if (!team) {
        fprintf(stderr, "piece_probe: %s\n", last_error());
        return 1;
    }
    hs_tensor whole = make_tensor(piece * threads);
    double sum = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        step(&whole, (uint64_t)r + 1, team);
        x[r] = now() - t0;
        sum += x[r];
    }
    qsort(x, reps, sizeof(double), by_value);
    printf("one tensor of %zu elements on a team of %d, us: median %.1f, mean %.1f, fastest %.1f\n",
           piece * threads, threads, x[reps / 2] * 1e6, sum / reps * 1e6, x[0] * 1e6);
    return 0;
}
