/* C smoke test: links the static library through include/halfstep.h, steps each optimizer three
 * times on every backend this CPU has, and compares every output word with the values the Rust
 * reference produced (examples/capi_expected.rs, read from the file named by argv[1]). Also
 * checks that a bad argument is refused with a message. Exit status 0 only if all agree. */
#include "halfstep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 100
#define INDEX_BASE 3
#define SEED 7

static float weights(int i) { return (float)(i % 7 - 3) * 0.125f; }
static float grad(int i, unsigned step) { return (float)((int)((i * 5 + step) % 11) - 5) * 0.015625f; }

static char expected[6][8192];
static int failures = 0;

static void out32(char *s, const float *x, int n) {
    for (int i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], 4);
        s += sprintf(s, " %08x", b);
    }
}
static void out16(char *s, const uint16_t *x, int n) {
    for (int i = 0; i < n; i++) s += sprintf(s, " %04x", x[i]);
}
static void out8(char *s, const uint8_t *x, int n) {
    for (int i = 0; i < n; i++) s += sprintf(s, " %02x", x[i]);
}

static void check(hs_status st, const char *what) {
    if (st != HS_OK) {
        fprintf(stderr, "smoke: %s failed with status %d: %s\n", what, (int)st, hs_last_error());
        exit(1);
    }
}

static hs_buffer buf(uint32_t kind, uint32_t rounding, void *data, uint16_t *trail) {
    hs_buffer b = {kind, rounding, data, trail};
    return b;
}

static hs_tensor tensor(hs_buffer w, hs_buffer g, hs_buffer s0, hs_buffer s1, uint32_t id) {
    hs_tensor t;
    memset(&t, 0, sizeof t);
    t.len = N;
    t.weights = w;
    t.grads = g;
    t.state[0] = s0;
    t.state[1] = s1;
    t.state[2] = buf(HS_F32, 0, NULL, NULL);
    t.stream_id = id;
    t.index_base = INDEX_BASE;
    return t;
}

static void compare(const char *backend, const char *name, int k, const char *got) {
    char line[8192];
    snprintf(line, sizeof line, "%s%s", name, got);
    if (strcmp(line, expected[k]) != 0) {
        fprintf(stderr, "smoke: %s %s differs from the Rust reference\n", backend, name);
        failures++;
    } else {
        printf("smoke: %-9s %-8s ok\n", backend, name);
    }
}

static void run(const char *backend) {
    float w32[N], g[N], s0[N], s1[N];
    uint16_t top[N], trail[N], h[N];
    char got[8192];
    hs_step_context ctx = {SEED, 1, HS_REPLICA_IDENTICAL};
    hs_threads *threads = hs_threads_new(2);
    /* A team of 2 with this thread in it (a new one for each backend's run). */
    hs_threads *mine = hs_threads_calling_thread(2);
    if (!mine) {
        fprintf(stderr, "smoke: hs_threads_calling_thread(2): %s\n", hs_last_error());
        failures++;
        return;
    }
    /* The finest grain: every step below that is cut at all is cut into 2048-element pieces. */
    check(hs_threads_set_grain(threads, 1), "hs_threads_set_grain");
    if (hs_threads_set_grain(threads, 0) != HS_INVALID_ARGUMENT || hs_threads_grain(threads) != 2048) {
        fprintf(stderr, "smoke: a grain of 1 is not 2048, or a grain of 0 was not refused\n");
        failures++;
    }
    /* Teams of other sizes may live beside it. */
    hs_threads *three = hs_threads_calling_thread(3);
    if (!three) {
        fprintf(stderr, "smoke: hs_threads_calling_thread(3) beside a team of 2: %s\n", hs_last_error());
        failures++;
    }
    hs_threads_free(three);

    /* SGD: split weights, momentum + nesterov, weight decay. */
    for (int i = 0; i < N; i++) { w32[i] = weights(i); s0[i] = 0.0f; }
    check(hs_split(w32, top, trail, N), "hs_split");
    hs_sgd_config sgd = {0.1f, 0.9f, 0.0f, 0.01f, 1, 0};
    for (unsigned step = 1; step <= 3; step++) {
        for (int i = 0; i < N; i++) g[i] = grad(i, step);
        ctx.step = step;
        hs_tensor t = tensor(buf(HS_SPLIT, 0, top, trail), buf(HS_F32, 0, g, NULL),
                             buf(HS_F32, 0, s0, NULL), buf(HS_F32, 0, NULL, NULL), 0);
        check(hs_sgd_step(&sgd, &ctx, &t, 1, threads), "hs_sgd_step");
    }
    out16(got, top, N); out16(got + strlen(got), trail, N); out32(got + strlen(got), s0, N);
    compare(backend, "sgd", 0, got);

    /* Adagrad: split weights. */
    for (int i = 0; i < N; i++) { w32[i] = weights(i); s0[i] = 0.0f; }
    check(hs_split(w32, top, trail, N), "hs_split");
    hs_adagrad_config adagrad = {0.05f, 0.0f, 0.0f, 1e-10f, 0.0f, 0};
    for (unsigned step = 1; step <= 3; step++) {
        for (int i = 0; i < N; i++) g[i] = grad(i, step);
        ctx.step = step;
        hs_tensor t = tensor(buf(HS_SPLIT, 0, top, trail), buf(HS_F32, 0, g, NULL),
                             buf(HS_F32, 0, s0, NULL), buf(HS_F32, 0, NULL, NULL), 1);
        check(hs_adagrad_step(&adagrad, &ctx, &t, 1, mine), "hs_adagrad_step");
    }
    got[0] = 0;
    out16(got, top, N); out16(got + strlen(got), trail, N); out32(got + strlen(got), s0, N);
    compare(backend, "adagrad", 1, got);

    /* AdamW: f32 weights, bf16 stochastic first moment, f32 second moment. */
    for (int i = 0; i < N; i++) { w32[i] = weights(i); h[i] = 0; s1[i] = 0.0f; }
    hs_adam_config adamw = {1e-2f, 0.9f, 0.999f, 1e-8f, 1e-2f, 1, 0, 0};
    for (unsigned step = 1; step <= 3; step++) {
        for (int i = 0; i < N; i++) g[i] = grad(i, step);
        ctx.step = step;
        hs_tensor t = tensor(buf(HS_F32, 0, w32, NULL), buf(HS_F32, 0, g, NULL),
                             buf(HS_BF16, HS_STOCHASTIC, h, NULL), buf(HS_F32, 0, s1, NULL), 2);
        check(hs_adam_step(&adamw, &ctx, &t, 1, threads), "hs_adam_step");
    }
    got[0] = 0;
    out32(got, w32, N); out16(got + strlen(got), h, N); out32(got + strlen(got), s1, N);
    compare(backend, "adamw", 2, got);

    /* LAMB: bf16 stochastic weights. */
    for (int i = 0; i < N; i++) { w32[i] = weights(i); s0[i] = 0.0f; s1[i] = 0.0f; }
    ctx.step = 1;
    check(hs_f32_to_16(w32, h, N, 0, HS_NEAREST_EVEN, &ctx, 3, INDEX_BASE), "hs_f32_to_16");
    hs_lamb_config lamb = {1e-2f, 0.9f, 0.999f, 1e-6f, 0.01f, 0.0f};
    hs_lamb_workspace *ws = hs_lamb_workspace_new();
    for (unsigned step = 1; step <= 3; step++) {
        for (int i = 0; i < N; i++) g[i] = grad(i, step);
        ctx.step = step;
        hs_tensor t = tensor(buf(HS_BF16, HS_STOCHASTIC, h, NULL), buf(HS_F32, 0, g, NULL),
                             buf(HS_F32, 0, s0, NULL), buf(HS_F32, 0, s1, NULL), 3);
        check(hs_lamb_step(&lamb, &ctx, &t, 1, threads, ws), "hs_lamb_step");
    }
    hs_lamb_workspace_free(ws);
    got[0] = 0;
    out16(got, h, N); out32(got + strlen(got), s0, N); out32(got + strlen(got), s1, N);
    compare(backend, "lamb", 3, got);

    /* NVFP4 and fp8 E4M3, stochastic, of values with bits below every quantum. */
    for (int i = 0; i < N; i++) w32[i] = (float)(i % 13 - 6) * 0.0371f;
    ctx.step = 1;
    float pts;
    uint8_t packed[N / 2], scales[(N + 15) / 16], codes[N];
    check(hs_nvfp4_tensor_scale(w32, N, &pts), "hs_nvfp4_tensor_scale");
    check(hs_quantize_nvfp4(w32, N, pts, packed, scales, HS_STOCHASTIC, &ctx, 5, INDEX_BASE), "hs_quantize_nvfp4");
    uint32_t pts_bits;
    memcpy(&pts_bits, &pts, 4);
    sprintf(got, " %08x", pts_bits);
    out8(got + strlen(got), packed, N / 2); out8(got + strlen(got), scales, (N + 15) / 16);
    compare(backend, "nvfp4", 4, got);
    check(hs_f32_to_fp8(w32, codes, N, HS_E4M3, HS_STOCHASTIC, &ctx, 6, INDEX_BASE), "hs_f32_to_fp8");
    got[0] = 0;
    out8(got, codes, N);
    compare(backend, "e4m3", 5, got);

    /* A refused call: negative learning rate. Nothing written, a message left. */
    hs_sgd_config bad = sgd;
    bad.lr = -1.0f;
    uint16_t before = top[0];
    hs_tensor t = tensor(buf(HS_SPLIT, 0, top, trail), buf(HS_F32, 0, g, NULL),
                         buf(HS_F32, 0, s0, NULL), buf(HS_F32, 0, NULL, NULL), 0);
    if (hs_sgd_step(&bad, &ctx, &t, 1, threads) != HS_INVALID_HYPERPARAMETER || top[0] != before ||
        strlen(hs_last_error()) == 0) {
        fprintf(stderr, "smoke: %s: a negative lr was not refused cleanly\n", backend);
        failures++;
    }
    hs_threads_free(threads);
    hs_threads_free(mine);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: smoke EXPECTED_FILE\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) { perror(argv[1]); return 2; }
    for (int k = 0; k < 6; k++) {
        if (!fgets(expected[k], sizeof expected[k], f)) { fprintf(stderr, "short file\n"); return 2; }
        expected[k][strcspn(expected[k], "\n")] = 0;
    }
    fclose(f);
    printf("halfstep %s, default backend %s\n", hs_version(), hs_backend());
    const char *backends[] = {"reference", "portable", "avx2", "avx512", "neon"};
    for (int b = 0; b < 5; b++) {
        if (!hs_backend_available(backends[b])) {
            printf("smoke: skipping backend %s: not available on this CPU/target\n", backends[b]);
            continue;
        }
        check(hs_force_backend(backends[b]), "hs_force_backend");
        run(backends[b]);
    }
    return failures ? 1 : 0;
}
