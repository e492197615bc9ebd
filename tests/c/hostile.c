/* Hostile-input test of the C ABI: calls every entry point with NULL, misaligned and overlapping
 * buffers, unknown enums, zero and huge lengths and counts, out-of-range coordinates and bad
 * hyperparameters, on every backend this CPU has. Each refused call must return the documented
 * status, leave a message in hs_last_error(), and leave every byte of the arena the buffers live
 * in (buffers and the guard bytes between them) as it was. Each group of cases also makes the
 * valid call it perturbs and expects HS_OK, so a case is refused for the reason it names.
 * CI builds it with AddressSanitizer and UBSan. Exit status 0 only if every case holds. */
#include "halfstep.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 64
#define SLOT 4096
#define SLOTS 32
#define ARENA (SLOT * SLOTS)

static unsigned char *arena;
static unsigned char snapshot[ARENA];
static int failures = 0, cases = 0;
static const char *backend = "auto";

/* Slot k's first byte, plus `skew` (to misalign). Slots start 256 bytes into their 4 KiB, so
 * every buffer has guard bytes on both sides. */
static void *slot(int k, size_t skew) { return arena + (size_t)k * SLOT + 256 + skew; }
static float *f32s(int k) { return (float *)slot(k, 0); }
static uint16_t *u16s(int k) { return (uint16_t *)slot(k, 0); }
static uint8_t *u8s(int k) { return (uint8_t *)slot(k, 0); }

/* Refills the arena with a pattern: finite f32 values in the buffers, 0xA5 elsewhere. */
static void fill(void) {
    memset(arena, 0xA5, ARENA);
    for (int k = 0; k < SLOTS; k++)
        for (int i = 0; i < 3 * N; i++) f32s(k)[i] = (float)((i * 7 + k) % 13 - 6) * 0.0625f;
}

/* An OpenMP runtime of one thread: enough to construct an `hs_threads_openmp` handle. */
static void serial_region(void (*f)(void *), void *data, unsigned threads, unsigned flags) {
    (void)threads;
    (void)flags;
    f(data);
}
static int one_thread(void) { return 1; }

static void expect(hs_status got, hs_status want, int line, const char *what) {
    cases++;
    const char *msg = hs_last_error();
    int bad = got != want;
    if (want != HS_OK && (msg == NULL || msg[0] == '\0')) bad = 1;
    if (want != HS_OK && memcmp(arena, snapshot, ARENA) != 0) {
        fprintf(stderr, "hostile [%s] line %d: %s wrote to the arena although refused\n", backend, line, what);
        bad = 1;
    }
    if (got != want)
        fprintf(stderr, "hostile [%s] line %d: %s returned %d, expected %d (%s)\n", backend, line, what, (int)got,
                (int)want, msg ? msg : "(null)");
    else if (bad && want != HS_OK)
        fprintf(stderr, "hostile [%s] line %d: %s gave no message\n", backend, line, what);
    failures += bad;
    /* The next case starts from the same arena. */
    fill();
    memcpy(snapshot, arena, ARENA);
}

/* EXPECT(status, call): runs `call` and checks status, message and arena. */
#define EXPECT(want, call) expect((call), (want), __LINE__, #call)

static const size_t HUGE_LENS[] = {SIZE_MAX, SIZE_MAX / 2, SIZE_MAX / 4 + 1, (size_t)HS_MAX_LEN + 1};
#define NHUGE (sizeof HUGE_LENS / sizeof HUGE_LENS[0])

static hs_step_context ctx(uint32_t step) {
    hs_step_context c = {7, step, HS_REPLICA_IDENTICAL};
    return c;
}

/* An address 64 bytes below the top of the address space: any buffer of 17+ floats there wraps. */
static void *near_top(void) { return (void *)(uintptr_t)(UINTPTR_MAX - 63); }

static void conversions(void) {
    hs_step_context c = ctx(1), bad_replica = {7, 1, 70000}, *null_ctx = NULL;
    float *f = f32s(0);
    uint16_t *h = u16s(2), *t = u16s(3);
    uint8_t *b = u8s(4), *s = u8s(5);
    float *f_odd = (float *)slot(0, 2);
    uint16_t *h_odd = (uint16_t *)slot(2, 1);
    float scale;

    /* f32 -> 16 bit. */
    EXPECT(HS_OK, hs_f32_to_16(f, h, N, 0, HS_STOCHASTIC, &c, 1, 0));
    EXPECT(HS_OK, hs_f32_to_16(f, h, N, 1, HS_NEAREST_EVEN, &c, 1, 0));
    for (size_t i = 0; i < NHUGE; i++) EXPECT(HS_OUT_OF_RANGE, hs_f32_to_16(f, h, HUGE_LENS[i], 0, 0, &c, 1, 0));
    EXPECT(HS_LENGTH_MISMATCH, hs_f32_to_16(f, h, 0, 0, HS_NEAREST_EVEN, &c, 1, 0));
    EXPECT(HS_NULL_POINTER, hs_f32_to_16(NULL, h, N, 0, 0, &c, 1, 0));
    EXPECT(HS_NULL_POINTER, hs_f32_to_16(f, NULL, N, 0, 0, &c, 1, 0));
    EXPECT(HS_NULL_POINTER, hs_f32_to_16(f, h, N, 0, 0, null_ctx, 1, 0));
    EXPECT(HS_MISALIGNED, hs_f32_to_16(f_odd, h, N, 0, 0, &c, 1, 0));
    EXPECT(HS_MISALIGNED, hs_f32_to_16(f, h_odd, N, 0, 0, &c, 1, 0));
    EXPECT(HS_INVALID_ARGUMENT, hs_f32_to_16(f, (uint16_t *)f, N, 0, 0, &c, 1, 0));
    EXPECT(HS_INVALID_ARGUMENT, hs_f32_to_16(f, (uint16_t *)(f + N - 1), N, 0, 0, &c, 1, 0));
    EXPECT(HS_INVALID_ARGUMENT, hs_f32_to_16(f, h, N, 0, 9, &c, 1, 0));
    EXPECT(HS_INVALID_ARGUMENT, hs_f32_to_16((const float *)near_top(), h, N, 0, 0, &c, 1, 0));
    EXPECT(HS_OUT_OF_RANGE, hs_f32_to_16(f, h, N, 0, HS_STOCHASTIC, &bad_replica, 1, 0));
    EXPECT(HS_OUT_OF_RANGE, hs_f32_to_16(f, h, N, 0, HS_STOCHASTIC, &c, 1u << 28, 0));
    EXPECT(HS_OUT_OF_RANGE, hs_f32_to_16(f, h, N, 0, HS_STOCHASTIC, &c, 1, (uint64_t)HS_MAX_LEN - N + 1));

    /* 16 bit -> f32. */
    EXPECT(HS_OK, hs_16_to_f32(h, f, N, 0));
    EXPECT(HS_OK, hs_16_to_f32(h, f, N, 1));
    for (size_t i = 0; i < NHUGE; i++) EXPECT(HS_OUT_OF_RANGE, hs_16_to_f32(h, f, HUGE_LENS[i], 0));
    EXPECT(HS_LENGTH_MISMATCH, hs_16_to_f32(h, f, 0, 0));
    EXPECT(HS_NULL_POINTER, hs_16_to_f32(NULL, f, N, 0));
    EXPECT(HS_MISALIGNED, hs_16_to_f32(h_odd, f, N, 0));
    EXPECT(HS_INVALID_ARGUMENT, hs_16_to_f32((const uint16_t *)f, f, N, 0));
    EXPECT(HS_INVALID_ARGUMENT, hs_16_to_f32((const uint16_t *)(f + N / 2), f, N, 1));

    /* Split and combine. */
    EXPECT(HS_OK, hs_split(f, h, t, N));
    EXPECT(HS_OK, hs_combine(h, t, f, N));
    for (size_t i = 0; i < NHUGE; i++) {
        EXPECT(HS_OUT_OF_RANGE, hs_split(f, h, t, HUGE_LENS[i]));
        EXPECT(HS_OUT_OF_RANGE, hs_combine(h, t, f, HUGE_LENS[i]));
    }
    EXPECT(HS_LENGTH_MISMATCH, hs_split(f, h, t, 0));
    EXPECT(HS_LENGTH_MISMATCH, hs_combine(h, t, f, 0));
    EXPECT(HS_INVALID_ARGUMENT, hs_split(f, h, h, N));
    EXPECT(HS_INVALID_ARGUMENT, hs_split(f, h, h + N - 1, N));
    EXPECT(HS_INVALID_ARGUMENT, hs_split(f, (uint16_t *)f, t, N));
    EXPECT(HS_INVALID_ARGUMENT, hs_combine(h, t, (float *)t, N));
    EXPECT(HS_NULL_POINTER, hs_combine(h, NULL, f, N));
    EXPECT(HS_MISALIGNED, hs_combine(h, t, f_odd, N));

    /* Element bits. */
    EXPECT(HS_OK, hs_fill_element_bits(&c, 1, 0, 2, h, N));
    for (size_t i = 0; i < NHUGE; i++) EXPECT(HS_OUT_OF_RANGE, hs_fill_element_bits(&c, 1, 0, 0, h, HUGE_LENS[i]));
    EXPECT(HS_LENGTH_MISMATCH, hs_fill_element_bits(&c, 1, 0, 0, h, 0));
    EXPECT(HS_INVALID_ARGUMENT, hs_fill_element_bits(&c, 1, 0, 4, h, N));
    EXPECT(HS_NULL_POINTER, hs_fill_element_bits(&c, 1, 0, 0, NULL, N));
    EXPECT(HS_MISALIGNED, hs_fill_element_bits(&c, 1, 0, 0, h_odd, N));
    EXPECT(HS_OUT_OF_RANGE, hs_fill_element_bits(&c, 1, (uint64_t)HS_MAX_LEN, 0, h, 1));

    /* fp8 and E8M0. */
    EXPECT(HS_OK, hs_f32_to_fp8(f, b, N, HS_E4M3, HS_STOCHASTIC, &c, 1, 0));
    EXPECT(HS_OK, hs_fp8_to_f32(b, f, N, HS_E5M2));
    EXPECT(HS_OK, hs_f32_to_e8m0(f, b, N));
    EXPECT(HS_OK, hs_e8m0_to_f32(b, f, N));
    for (size_t i = 0; i < NHUGE; i++) {
        EXPECT(HS_OUT_OF_RANGE, hs_f32_to_fp8(f, b, HUGE_LENS[i], HS_E4M3, 0, &c, 1, 0));
        EXPECT(HS_OUT_OF_RANGE, hs_fp8_to_f32(b, f, HUGE_LENS[i], HS_E4M3));
        EXPECT(HS_OUT_OF_RANGE, hs_f32_to_e8m0(f, b, HUGE_LENS[i]));
        EXPECT(HS_OUT_OF_RANGE, hs_e8m0_to_f32(b, f, HUGE_LENS[i]));
    }
    EXPECT(HS_LENGTH_MISMATCH, hs_f32_to_fp8(f, b, 0, HS_E4M3, 0, &c, 1, 0));
    EXPECT(HS_LENGTH_MISMATCH, hs_fp8_to_f32(b, f, 0, HS_E4M3));
    EXPECT(HS_LENGTH_MISMATCH, hs_f32_to_e8m0(f, b, 0));
    EXPECT(HS_LENGTH_MISMATCH, hs_e8m0_to_f32(b, f, 0));
    EXPECT(HS_INVALID_ARGUMENT, hs_f32_to_fp8(f, b, N, 2, 0, &c, 1, 0));
    EXPECT(HS_INVALID_ARGUMENT, hs_fp8_to_f32(b, f, N, 7));
    EXPECT(HS_INVALID_ARGUMENT, hs_f32_to_fp8(f, (uint8_t *)f, N, HS_E4M3, 0, &c, 1, 0));
    EXPECT(HS_INVALID_ARGUMENT, hs_fp8_to_f32((const uint8_t *)f + 3, f, N, HS_E4M3));
    EXPECT(HS_INVALID_ARGUMENT, hs_f32_to_e8m0(f, (uint8_t *)f + 1, N));
    EXPECT(HS_INVALID_ARGUMENT, hs_e8m0_to_f32((const uint8_t *)f, f, N));
    EXPECT(HS_MISALIGNED, hs_fp8_to_f32(b, f_odd, N, HS_E4M3));
    EXPECT(HS_NULL_POINTER, hs_f32_to_e8m0(NULL, b, N));

    /* NVFP4 and MXFP4: packed holds N / 2 bytes, scales N / 16 (N / 32). */
    EXPECT(HS_OK, hs_nvfp4_tensor_scale(f, N, &scale));
    EXPECT(HS_OK, hs_quantize_nvfp4(f, N, 0.5f, b, s, HS_STOCHASTIC, &c, 1, 0));
    EXPECT(HS_OK, hs_dequantize_nvfp4(b, s, 0.5f, f, N));
    EXPECT(HS_OK, hs_quantize_mxfp4(f, N, b, s, HS_NEAREST_EVEN, &c, 1, 0));
    EXPECT(HS_OK, hs_dequantize_mxfp4(b, s, f, N));
    for (size_t i = 0; i < NHUGE; i++) {
        size_t n = HUGE_LENS[i];
        EXPECT(HS_OUT_OF_RANGE, hs_nvfp4_tensor_scale(f, n, &scale));
        EXPECT(HS_OUT_OF_RANGE, hs_quantize_nvfp4(f, n, 0.5f, b, s, 0, &c, 1, 0));
        EXPECT(HS_OUT_OF_RANGE, hs_dequantize_nvfp4(b, s, 0.5f, f, n));
        EXPECT(HS_OUT_OF_RANGE, hs_quantize_mxfp4(f, n, b, s, 0, &c, 1, 0));
        EXPECT(HS_OUT_OF_RANGE, hs_dequantize_mxfp4(b, s, f, n));
    }
    EXPECT(HS_LENGTH_MISMATCH, hs_nvfp4_tensor_scale(f, 0, &scale));
    EXPECT(HS_LENGTH_MISMATCH, hs_quantize_nvfp4(f, 0, 0.5f, b, s, 0, &c, 1, 0));
    EXPECT(HS_LENGTH_MISMATCH, hs_dequantize_nvfp4(b, s, 0.5f, f, 0));
    EXPECT(HS_LENGTH_MISMATCH, hs_quantize_mxfp4(f, 0, b, s, 0, &c, 1, 0));
    EXPECT(HS_LENGTH_MISMATCH, hs_dequantize_mxfp4(b, s, f, 0));
    EXPECT(HS_NULL_POINTER, hs_nvfp4_tensor_scale(f, N, NULL));
    EXPECT(HS_MISALIGNED, hs_nvfp4_tensor_scale(f, N, (float *)slot(6, 1)));
    EXPECT(HS_INVALID_ARGUMENT, hs_nvfp4_tensor_scale(f, N, f + 5));
    EXPECT(HS_INVALID_HYPERPARAMETER, hs_quantize_nvfp4(f, N, 0.0f, b, s, 0, &c, 1, 0));
    EXPECT(HS_INVALID_HYPERPARAMETER, hs_quantize_nvfp4(f, N, -1.0f, b, s, 0, &c, 1, 0));
    EXPECT(HS_INVALID_HYPERPARAMETER, hs_dequantize_nvfp4(b, s, (float)NAN, f, N));
    EXPECT(HS_INVALID_ARGUMENT, hs_quantize_nvfp4(f, N, 0.5f, b, b + 1, 0, &c, 1, 0));
    EXPECT(HS_INVALID_ARGUMENT, hs_quantize_mxfp4(f, N, (uint8_t *)f + 8, s, 0, &c, 1, 0));
    EXPECT(HS_INVALID_ARGUMENT, hs_dequantize_mxfp4(b, (const uint8_t *)f, f, N));
    EXPECT(HS_INVALID_ARGUMENT, hs_quantize_mxfp4(f, N, b, s, 5, &c, 1, 0));
    EXPECT(HS_NULL_POINTER, hs_quantize_mxfp4(f, N, NULL, s, 0, &c, 1, 0));
    EXPECT(HS_NULL_POINTER, hs_dequantize_nvfp4(b, NULL, 0.5f, f, N));
    EXPECT(HS_OUT_OF_RANGE, hs_quantize_nvfp4(f, N, 0.5f, b, s, HS_STOCHASTIC, &bad_replica, 1, 0));

    /* A nonzero tensor too small for amax / 2688: the scale it gets is one the quantizer takes. */
    memset(f, 0, N * sizeof(float));
    uint32_t tiny = 0x00000100; /* 256 * 2^-149 */
    memcpy(&f[3], &tiny, 4);
    scale = 0.0f;
    cases++;
    if (hs_nvfp4_tensor_scale(f, N, &scale) != HS_OK || !(scale > 0.0f)
        || hs_quantize_nvfp4(f, N, scale, b, s, HS_NEAREST_EVEN, &c, 1, 0) != HS_OK) {
        fprintf(stderr, "hostile [%s]: the NVFP4 scale of a tiny tensor (%g) is refused: %s\n", backend,
                (double)scale, hs_last_error());
        failures++;
    }
    fill();
    memcpy(snapshot, arena, ARENA);
}

/* The fixture of the step cases: two tensors of f32 weights, f32 grads and two f32 states,
 * in slots 8-15; the descriptor array itself lives in slot 20 (inside the arena). */
static hs_buffer fbuf(int k) {
    hs_buffer b = {HS_F32, 0, f32s(k), NULL};
    return b;
}
static hs_buffer none(void) {
    hs_buffer b = {HS_F32, 0, NULL, NULL};
    return b;
}
static hs_tensor *descriptors(int states) {
    hs_tensor t[2];
    memset(t, 0, sizeof t);
    for (int i = 0; i < 2; i++) {
        int k = 8 + 4 * i;
        t[i].len = N;
        t[i].weights = fbuf(k);
        t[i].grads = fbuf(k + 1);
        t[i].state[0] = states >= 1 ? fbuf(k + 2) : none();
        t[i].state[1] = states >= 2 ? fbuf(k + 3) : none();
        t[i].state[2] = none();
        t[i].stream_id = (uint32_t)i;
    }
    hs_tensor *d = (hs_tensor *)slot(20, 0);
    memcpy(d, t, sizeof t);
    memcpy(snapshot, arena, ARENA);
    return d;
}

typedef hs_status (*step_fn)(hs_tensor *t, size_t count, const hs_step_context *c, int variant);
static hs_lamb_workspace *ws;

/* variant 0: valid config; 1: NaN lr; 2: negative lr; 3: NULL config. */
static hs_status sgd(hs_tensor *t, size_t n, const hs_step_context *c, int v) {
    hs_sgd_config k = {v == 1 ? (float)NAN : v == 2 ? -0.1f : 0.1f, 0.9f, 0.0f, 0.01f, 1, 0};
    return hs_sgd_step(v == 3 ? NULL : &k, c, t, n, NULL);
}
static hs_status adagrad(hs_tensor *t, size_t n, const hs_step_context *c, int v) {
    hs_adagrad_config k = {v == 1 ? (float)NAN : v == 2 ? -0.1f : 0.1f, 0.0f, 0.0f, 1e-10f, 0.0f, 0};
    return hs_adagrad_step(v == 3 ? NULL : &k, c, t, n, NULL);
}
static hs_status adam(hs_tensor *t, size_t n, const hs_step_context *c, int v) {
    hs_adam_config k = {v == 1 ? (float)NAN : v == 2 ? -0.1f : 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 0, 0};
    return hs_adam_step(v == 3 ? NULL : &k, c, t, n, NULL);
}
static hs_status lamb(hs_tensor *t, size_t n, const hs_step_context *c, int v) {
    hs_lamb_config k = {v == 1 ? (float)NAN : v == 2 ? -0.1f : 1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 10.0f};
    return hs_lamb_step(v == 3 ? NULL : &k, c, t, n, NULL, ws);
}

static void steps(void) {
    struct {
        const char *name;
        step_fn f;
        int states;
    } opts[] = {{"sgd", sgd, 1}, {"adagrad", adagrad, 1}, {"adam", adam, 2}, {"lamb", lamb, 2}};
    hs_step_context c = ctx(1), c0 = ctx(0);
    for (int o = 0; o < 4; o++) {
        step_fn f = opts[o].f;
        int st = opts[o].states;
        hs_tensor *d;
        fprintf(stderr, "hostile [%s]: %s\n", backend, opts[o].name);
        d = descriptors(st);
        EXPECT(HS_OK, f(d, 2, &c, 0));
        d = descriptors(st);
        EXPECT(HS_OK, f(d, 0, &c, 0)); /* an empty group is a step of nothing */
        for (size_t i = 0; i < NHUGE; i++) {
            d = descriptors(st);
            EXPECT(HS_OUT_OF_RANGE, f(d, HUGE_LENS[i], &c, 0));
            d = descriptors(st);
            d[1].len = HUGE_LENS[i];
            memcpy(snapshot, arena, ARENA);
            EXPECT(HS_OUT_OF_RANGE, f(d, 2, &c, 0));
        }
        d = descriptors(st);
        d[0].len = 0;
        d[1].len = 0;
        memcpy(snapshot, arena, ARENA);
        EXPECT(HS_LENGTH_MISMATCH, f(d, 2, &c, 0));
        d = descriptors(st);
        EXPECT(HS_INVALID_HYPERPARAMETER, f(d, 2, &c, 1));
        d = descriptors(st);
        EXPECT(HS_INVALID_HYPERPARAMETER, f(d, 2, &c, 2));
        d = descriptors(st);
        EXPECT(HS_NULL_POINTER, f(d, 2, &c, 3));
        d = descriptors(st);
        EXPECT(HS_NULL_POINTER, f(d, 2, NULL, 0));
        d = descriptors(st);
        EXPECT(HS_OUT_OF_RANGE, f(d, 2, &c0, 0));
        d = descriptors(st);
        EXPECT(HS_NULL_POINTER, f(NULL, 2, &c, 0));
        EXPECT(HS_MISALIGNED, f((hs_tensor *)slot(21, 4), 2, &c, 0));
        /* Two tensors sharing weights; one's grads in the other's state; a state half over the
         * next tensor's weights; weights over the descriptor array. */
        d = descriptors(st);
        d[1].weights.data = d[0].weights.data;
        memcpy(snapshot, arena, ARENA);
        EXPECT(HS_INVALID_ARGUMENT, f(d, 2, &c, 0));
        d = descriptors(st);
        d[1].grads.data = d[0].state[0].data;
        memcpy(snapshot, arena, ARENA);
        EXPECT(HS_INVALID_ARGUMENT, f(d, 2, &c, 0));
        d = descriptors(st);
        d[0].state[0].data = (float *)d[1].weights.data - N / 2;
        memcpy(snapshot, arena, ARENA);
        EXPECT(HS_INVALID_ARGUMENT, f(d, 2, &c, 0));
        d = descriptors(st);
        d[1].weights.data = d;
        memcpy(snapshot, arena, ARENA);
        EXPECT(HS_INVALID_ARGUMENT, f(d, 2, &c, 0));
        d = descriptors(st);
        d[0].weights.data = (char *)d[0].weights.data + 2;
        memcpy(snapshot, arena, ARENA);
        EXPECT(HS_MISALIGNED, f(d, 2, &c, 0));
        d = descriptors(st);
        d[1].grads.data = NULL;
        memcpy(snapshot, arena, ARENA);
        EXPECT(HS_NULL_POINTER, f(d, 2, &c, 0));
        d = descriptors(st);
        d[1].weights.data = near_top();
        memcpy(snapshot, arena, ARENA);
        EXPECT(HS_INVALID_ARGUMENT, f(d, 2, &c, 0));
        d = descriptors(st);
        d[1].weights.kind = 9;
        memcpy(snapshot, arena, ARENA);
        EXPECT(HS_INVALID_ARGUMENT, f(d, 2, &c, 0));
        d = descriptors(st);
        d[0].state[0].kind = HS_BF16;
        d[0].state[0].rounding = 9;
        memcpy(snapshot, arena, ARENA);
        EXPECT(HS_INVALID_ARGUMENT, f(d, 2, &c, 0));
        d = descriptors(st);
        d[1].stream_id = 1u << 28;
        memcpy(snapshot, arena, ARENA);
        EXPECT(HS_OUT_OF_RANGE, f(d, 2, &c, 0));
        d = descriptors(st);
        d[1].index_base = (uint64_t)HS_MAX_LEN - N + 1;
        memcpy(snapshot, arena, ARENA);
        EXPECT(HS_OUT_OF_RANGE, f(d, 2, &c, 0));
    }
    hs_tensor *d = descriptors(2);
    hs_lamb_config k = {1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 10.0f};
    EXPECT(HS_NULL_POINTER, hs_lamb_step(&k, &c, d, 2, NULL, NULL));
}

static void threads_and_checkpoints(void) {
    uint8_t *blob = u8s(24);
    uint64_t *seed = (uint64_t *)slot(25, 0);
    uint32_t *steps = (uint32_t *)slot(26, 0);

    cases += 3;
    hs_threads *t = hs_threads_new(UINT32_MAX);
    if (t != NULL || hs_last_error()[0] == '\0') {
        fprintf(stderr, "hostile: hs_threads_new(UINT32_MAX) gave %p, message '%s'\n", (void *)t, hs_last_error());
        failures++;
    }
    t = hs_threads_new(HS_MAX_THREADS + 1);
    if (t != NULL || hs_last_error()[0] == '\0') {
        fprintf(stderr, "hostile: hs_threads_new(HS_MAX_THREADS + 1) was not refused\n");
        failures++;
    }
    t = hs_threads_calling_thread(UINT32_MAX);
    if (t != NULL || hs_last_error()[0] == '\0') {
        fprintf(stderr, "hostile: hs_threads_calling_thread(UINT32_MAX) was not refused\n");
        failures++;
    }
    /* hs_threads_openmp: a NULL entry point, or too many threads (a runtime of one thread stands in). */
    cases += 4;
    t = hs_threads_openmp(NULL, one_thread, one_thread, 2);
    if (t != NULL || hs_last_error()[0] == '\0') {
        fprintf(stderr, "hostile: hs_threads_openmp with a NULL GOMP_parallel was not refused\n");
        failures++;
    }
    t = hs_threads_openmp(serial_region, NULL, one_thread, 2);
    if (t != NULL || hs_last_error()[0] == '\0') {
        fprintf(stderr, "hostile: hs_threads_openmp with a NULL omp_get_thread_num was not refused\n");
        failures++;
    }
    t = hs_threads_openmp(serial_region, one_thread, NULL, 0);
    if (t != NULL || hs_last_error()[0] == '\0') {
        fprintf(stderr, "hostile: hs_threads_openmp with a NULL omp_get_max_threads was not refused\n");
        failures++;
    }
    t = hs_threads_openmp(serial_region, one_thread, one_thread, HS_MAX_THREADS + 1);
    if (t != NULL || hs_last_error()[0] == '\0') {
        fprintf(stderr, "hostile: hs_threads_openmp(HS_MAX_THREADS + 1) was not refused\n");
        failures++;
    }
    t = hs_threads_new(2);
    EXPECT(HS_INVALID_ARGUMENT, hs_threads_set_grain(t, 0));
    EXPECT(HS_NULL_POINTER, hs_threads_set_grain(NULL, 4096));
    EXPECT(HS_OK, hs_threads_set_grain(t, 4096));
    hs_threads_free(t);

    EXPECT(HS_OK, hs_checkpoint_encode(42, 9, blob));
    hs_checkpoint_encode(42, 9, blob);
    memcpy(snapshot, arena, ARENA);
    EXPECT(HS_OK, hs_checkpoint_decode(blob, HS_CHECKPOINT_BYTES, seed, steps));
    hs_checkpoint_encode(42, 9, blob);
    hs_checkpoint_decode(blob, HS_CHECKPOINT_BYTES, seed, steps);
    cases++;
    if (*seed != 42 || *steps != 9) {
        fprintf(stderr, "hostile: checkpoint round trip gave seed %llu, steps %u\n", (unsigned long long)*seed,
                (unsigned)*steps);
        failures++;
    }
    fill();
    memcpy(snapshot, arena, ARENA);
    EXPECT(HS_NULL_POINTER, hs_checkpoint_encode(1, 1, NULL));
    hs_checkpoint_encode(42, 9, blob);
    memcpy(snapshot, arena, ARENA);
    EXPECT(HS_INVALID_ARGUMENT, hs_checkpoint_decode(blob, HS_CHECKPOINT_BYTES - 1, seed, steps));
    hs_checkpoint_encode(42, 9, blob);
    memcpy(snapshot, arena, ARENA);
    EXPECT(HS_OUT_OF_RANGE, hs_checkpoint_decode(blob, SIZE_MAX, seed, steps));
    hs_checkpoint_encode(42, 9, blob);
    memcpy(snapshot, arena, ARENA);
    EXPECT(HS_NULL_POINTER, hs_checkpoint_decode(blob, HS_CHECKPOINT_BYTES, NULL, steps));
    hs_checkpoint_encode(42, 9, blob);
    memcpy(snapshot, arena, ARENA);
    EXPECT(HS_MISALIGNED, hs_checkpoint_decode(blob, HS_CHECKPOINT_BYTES, (uint64_t *)slot(25, 4), steps));
    hs_checkpoint_encode(42, 9, blob);
    blob[0] = 0; /* version 0 was never written */
    memcpy(snapshot, arena, ARENA);
    EXPECT(HS_INVALID_ARGUMENT, hs_checkpoint_decode(blob, HS_CHECKPOINT_BYTES, seed, steps));
    hs_checkpoint_encode(42, 9, blob);
    blob[3] = 0x7f; /* a version far past any this library writes */
    memcpy(snapshot, arena, ARENA);
    EXPECT(HS_INVALID_ARGUMENT, hs_checkpoint_decode(blob, HS_CHECKPOINT_BYTES, seed, steps));

    EXPECT(HS_NULL_POINTER, hs_force_backend(NULL));
    EXPECT(HS_INVALID_ARGUMENT, hs_force_backend("sse9"));
    cases++;
    if (hs_backend_available(NULL) != 0 || hs_backend_available("sse9") != 0) {
        fprintf(stderr, "hostile: hs_backend_available accepted NULL or an unknown name\n");
        failures++;
    }
}

int main(void) {
    static const char *backends[] = {"avx512", "avx2", "neon", "portable", "reference"};
    arena = aligned_alloc(SLOT, ARENA);
    if (arena == NULL) return 2;
    ws = hs_lamb_workspace_new();
    fill();
    memcpy(snapshot, arena, ARENA);
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++) {
        if (!hs_backend_available(backends[i])) {
            printf("hostile: backend %s not available on this CPU, skipped\n", backends[i]);
            continue;
        }
        backend = backends[i];
        if (hs_force_backend(backend) != HS_OK) {
            fprintf(stderr, "hostile: forcing %s failed: %s\n", backend, hs_last_error());
            return 1;
        }
        conversions();
        steps();
    }
    hs_force_backend("auto");
    backend = "auto";
    threads_and_checkpoints();
    hs_lamb_workspace_free(ws);
    free(arena);
    printf("hostile: %d cases, %d failed\n", cases, failures);
    return failures != 0;
}
