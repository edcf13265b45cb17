/*
 * Optional native kernels for @compat/tensor-ops (N-API, C99).
 *
 * Each kernel computes exactly what the JS kernels compute (and what ggml computes): the same f32
 * operations in the same order, with floating-point contraction disabled so no FMA can change a
 * rounding. AVX2/F16C variants are selected at load time when the CPU has them; GCC vectorizes the
 * plain loops (kernels.h, shared with the WASM tier) in the AVX2 variants.
 */
#if defined(__linux__)
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/types.h> /* loff_t: not pulled in by the other headers on every glibc target (aarch64) */
#include <unistd.h>
#include <linux/fs.h>
#endif
#include <node_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TOPS_X86 1
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h> /* Advanced SIMD is part of every AArch64 CPU: no run-time check needed */
#define TOPS_NEON 1
#endif

#pragma GCC optimize("fp-contract=off")

enum {
    T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8, T_Q4_K = 12, T_Q5_K = 13,
    T_Q6_K = 14, T_IQ4_NL = 20, T_IQ4_XS = 23, T_BF16 = 30, T_MXFP4 = 39
};

#include "kernels.h"

DEFINE_PLAIN_KERNELS(scalar, )

#ifdef TOPS_X86
DEFINE_PLAIN_KERNELS(avx2, __attribute__((target("avx2,f16c"))))

/* F16C converts half -> single exactly, quieting signalling NaNs just as ggml's float path does. */
__attribute__((target("avx2,f16c"))) static void f16_f16c(const uint8_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *) (src + 2 * i));
        __m128i b = _mm_loadu_si128((const __m128i *) (src + 2 * i + 16));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(a));
        _mm256_storeu_ps(dst + i + 8, _mm256_cvtph_ps(b));
    }
    for (; i < n; i++) dst[i] = half_to_float(rd16(src + 2 * i));
}
#endif

#ifdef TOPS_X86
/* MXFP4 with a byte shuffle as the 16-entry codebook lookup; int8 -> f32 is exact, one multiply rounds. */
__attribute__((target("avx2"))) static void mxfp4_shuffle(const uint8_t *src, float *dst, size_t nb) {
    const __m128i table = _mm_loadu_si128((const __m128i *) FP4);
    const __m128i low4 = _mm_set1_epi8(0x0F);
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = src + 17 * i;
        const __m256 d = _mm256_set1_ps(e8m0_half(b[0]));
        const __m128i q = _mm_loadu_si128((const __m128i *) (b + 1));
        const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(q, low4));
        const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), low4));
        float *y = dst + 32 * i;
        _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
        _mm256_storeu_ps(y + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
        _mm256_storeu_ps(y + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
        _mm256_storeu_ps(y + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
    }
}
#endif

#ifdef TOPS_NEON
/* FCVTL converts half -> single exactly; with the default FPCR (DN=0) NaNs keep their payload and
 * come out quiet, as from the float trick above. */
static void f16_neon(const uint8_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float16x8_t h = vreinterpretq_f16_u8(vld1q_u8(src + 2 * i));
        vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
        vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
    }
    for (; i < n; i++) dst[i] = half_to_float(rd16(src + 2 * i));
}

/* MXFP4 with a table lookup (TBL) as the codebook; int8 -> f32 is exact, one multiply rounds. */
static void mxfp4_neon(const uint8_t *src, float *dst, size_t nb) {
    const int8x16_t table = vld1q_s8(FP4);
    const uint8x16_t low4 = vdupq_n_u8(0x0F);
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = src + 17 * i;
        const float32x4_t d = vdupq_n_f32(e8m0_half(b[0]));
        const uint8x16_t q = vld1q_u8(b + 1);
        const int8x16_t v[2] = {vqtbl1q_s8(table, vandq_u8(q, low4)), vqtbl1q_s8(table, vshrq_n_u8(q, 4))};
        float *y = dst + 32 * i;
        for (int h = 0; h < 2; h++, y += 16) {
            const int16x8_t lo = vmovl_s8(vget_low_s8(v[h])), hi = vmovl_high_s8(v[h]);
            vst1q_f32(y, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
            vst1q_f32(y + 4, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d));
            vst1q_f32(y + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
            vst1q_f32(y + 12, vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d));
        }
    }
}
#endif

typedef void (*kernel_fn)(const uint8_t *, float *, size_t);
struct kernel { int type; size_t block_bytes; size_t block_size; kernel_fn fn; };
static struct kernel kernels[16];
static int n_kernels = 0;
static const char *isa_name = "scalar";

static void select_kernels(int allow_simd) {
    int fast = 0;
#ifdef TOPS_X86
    __builtin_cpu_init();
    fast = allow_simd && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#endif
    (void) allow_simd;
    (void) fast;
    isa_name = "scalar";
    n_kernels = 0;
#define ADD(T, BB, BS, FN) kernels[n_kernels++] = (struct kernel) {T, BB, BS, FN}
#ifdef TOPS_X86
    if (fast) {
        isa_name = "avx2+f16c";
        ADD(T_F16, 2, 1, f16_f16c);
        ADD(T_BF16, 2, 1, bf16_avx2);
        ADD(T_Q8_0, 34, 32, q8_0_avx2);
        ADD(T_Q4_K, 144, 256, q4_k_avx2);
        ADD(T_Q6_K, 210, 256, q6_k_avx2);
        ADD(T_MXFP4, 17, 32, mxfp4_shuffle);
        ADD(T_Q4_0, 18, 32, q4_0_avx2);
        ADD(T_Q4_1, 20, 32, q4_1_avx2);
        ADD(T_Q5_0, 22, 32, q5_0_avx2);
        ADD(T_Q5_1, 24, 32, q5_1_avx2);
        ADD(T_Q5_K, 176, 256, q5_k_avx2);
        ADD(T_IQ4_NL, 18, 32, iq4_nl_avx2);
        ADD(T_IQ4_XS, 136, 256, iq4_xs_avx2);
        return;
    }
#endif
    ADD(T_F16, 2, 1, f16_scalar);
    ADD(T_BF16, 2, 1, bf16_scalar);
    ADD(T_Q8_0, 34, 32, q8_0_scalar);
    ADD(T_Q4_K, 144, 256, q4_k_scalar);
    ADD(T_Q6_K, 210, 256, q6_k_scalar);
    ADD(T_MXFP4, 17, 32, mxfp4_scalar);
    ADD(T_Q4_0, 18, 32, q4_0_scalar);
    ADD(T_Q4_1, 20, 32, q4_1_scalar);
    ADD(T_Q5_0, 22, 32, q5_0_scalar);
    ADD(T_Q5_1, 24, 32, q5_1_scalar);
    ADD(T_Q5_K, 176, 256, q5_k_scalar);
    ADD(T_IQ4_NL, 18, 32, iq4_nl_scalar);
    ADD(T_IQ4_XS, 136, 256, iq4_xs_scalar);
#ifdef TOPS_NEON
    /* The generic kernels are already auto-vectorized for Advanced SIMD (-O3); these two are hand-written. */
    if (allow_simd) {
        isa_name = "neon";
        for (int i = 0; i < n_kernels; i++) {
            if (kernels[i].type == T_F16) kernels[i].fn = f16_neon;
            if (kernels[i].type == T_MXFP4) kernels[i].fn = mxfp4_neon;
        }
    }
#endif
#undef ADD
}

#define CHECK(call)                                                                               \
    do {                                                                                          \
        if ((call) != napi_ok) { napi_throw_error(env, NULL, "tensor_ops: N-API call failed"); return NULL; } \
    } while (0)

/* A typed array argument's data and element count; false (nothing thrown) unless it is one of type `want`. */
static int typed_array_of(napi_env env, napi_value value, napi_typedarray_type want, void **data, size_t *length) {
    napi_typedarray_type type;
    napi_value buffer;
    size_t offset;
    return napi_get_typedarray_info(env, value, &type, length, data, &buffer, &offset) == napi_ok && type == want;
}

/* toF32(type, src: Uint8Array, dst: Float32Array, nBlocks) -> boolean (false: no kernel for type). */
static napi_value to_f32(napi_env env, napi_callback_info info) {
    size_t argc = 4;
    napi_value argv[4], result;
    CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
    if (argc < 4) { napi_throw_type_error(env, NULL, "toF32 needs 4 arguments"); return NULL; }
    int32_t type;
    double nblocks_d;
    CHECK(napi_get_value_int32(env, argv[0], &type));
    CHECK(napi_get_value_double(env, argv[3], &nblocks_d));
    const struct kernel *k = NULL;
    for (int i = 0; i < n_kernels; i++) if (kernels[i].type == type) k = &kernels[i];
    if (!k) { CHECK(napi_get_boolean(env, 0, &result)); return result; }

    size_t slen, dlen;
    void *sdata, *ddata;
    if (!typed_array_of(env, argv[1], napi_uint8_array, &sdata, &slen) || !typed_array_of(env, argv[2], napi_float32_array, &ddata, &dlen)) {
        napi_throw_type_error(env, NULL, "toF32 expects a Uint8Array source and a Float32Array destination");
        return NULL;
    }
    if (!(nblocks_d >= 0) || nblocks_d > 9007199254740991.0) { napi_throw_range_error(env, NULL, "bad block count"); return NULL; }
    const size_t nb = (size_t) nblocks_d;
    if (slen < nb * k->block_bytes || dlen < nb * k->block_size) {
        napi_throw_range_error(env, NULL, "toF32: buffers too small for the block count");
        return NULL;
    }
    k->fn((const uint8_t *) sdata, (float *) ddata, nb); /* element count for F16/BF16 (block size 1) */
    CHECK(napi_get_boolean(env, 1, &result));
    return result;
}

static napi_value types(napi_env env, napi_callback_info info) {
    (void) info;
    napi_value arr, v;
    CHECK(napi_create_array_with_length(env, (size_t) n_kernels, &arr));
    for (int i = 0; i < n_kernels; i++) {
        CHECK(napi_create_int32(env, kernels[i].type, &v));
        CHECK(napi_set_element(env, arr, (uint32_t) i, v));
    }
    return arr;
}

static napi_value isa(napi_env env, napi_callback_info info) {
    (void) info;
    napi_value s;
    CHECK(napi_create_string_utf8(env, isa_name, NAPI_AUTO_LENGTH, &s));
    return s;
}

/* setIsa("scalar" | "auto") -> name of the instruction set now in use (lets tests cover both). */
static napi_value set_isa(napi_env env, napi_callback_info info) {
    size_t argc = 1, len = 0;
    napi_value argv[1];
    char buf[16] = {0};
    CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
    if (argc >= 1) CHECK(napi_get_value_string_utf8(env, argv[0], buf, sizeof buf, &len));
    select_kernels(strcmp(buf, "scalar") != 0);
    return isa(env, info);
}

/*
 * Reads argv[0..n) as whole numbers in [min, max] into out; on anything else throws a
 * RangeError with `message` and returns 0.
 */
static int integer_args(napi_env env, napi_value *argv, int n, double min, double max, const char *message, double *out) {
    for (int i = 0; i < n; i++) {
        if (napi_get_value_double(env, argv[i], &out[i]) != napi_ok || !(out[i] >= min) || out[i] > max || out[i] != (double) (int64_t) out[i]) {
            napi_throw_range_error(env, NULL, message);
            return 0;
        }
    }
    return 1;
}

/*
 * copyFileRange(fdIn, offIn, fdOut, offOut, length) -> bytes copied by the kernel (copy_file_range;
 * filesystems that support it share extents instead of copying). Copies until `length` or the end
 * of the input. Returns -errno when the kernel refuses before copying anything (ENOSYS, EXDEV,
 * EINVAL, EOPNOTSUPP...), so the caller falls back to read/write; throws on a failure midway.
 * Synchronous: the caller keeps each call to a bounded length so the event loop is not held long.
 */
static napi_value copy_file_range_js(napi_env env, napi_callback_info info) {
    size_t argc = 5;
    napi_value argv[5], result;
    double a[5];
    CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
    if (argc < 5) { napi_throw_type_error(env, NULL, "copyFileRange(fdIn, offIn, fdOut, offOut, length)"); return NULL; }
    if (!integer_args(env, argv, 5, 0, 9007199254740991.0, "copyFileRange: arguments must be non-negative integers", a)) return NULL;
#if defined(__linux__)
    loff_t in_off = (loff_t) a[1], out_off = (loff_t) a[3];
    uint64_t left = (uint64_t) a[4], done = 0;
    while (left > 0) {
        size_t want = left > (1u << 30) ? (1u << 30) : (size_t) left;
        ssize_t n = copy_file_range((int) a[0], &in_off, (int) a[2], &out_off, want, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (done == 0) { CHECK(napi_create_double(env, -(double) errno, &result)); return result; }
            char msg[96];
            snprintf(msg, sizeof msg, "copy_file_range failed after %llu bytes: %s", (unsigned long long) done, strerror(errno));
            napi_throw_error(env, "EIO", msg);
            return NULL;
        }
        if (n == 0) break; /* end of input */
        done += (uint64_t) n;
        left -= (uint64_t) n;
    }
    CHECK(napi_create_double(env, (double) done, &result));
#else
    CHECK(napi_create_double(env, -38.0 /* ENOSYS */, &result));
#endif
    return result;
}

/*
 * copyFileRangeAsync(fdIn, offIn, fdOut, offOut, length) -> a promise of what copyFileRange
 * returns (bytes copied, or -errno when refused before the first byte; rejected on a failure
 * midway). The copy runs on libuv's thread pool: the kernel copies a large range into the page
 * cache at memory speed, which held the event loop for its whole length, so two outputs' copies,
 * the write-behind flushes' completions and the computed tensors waited for each other.
 */
typedef struct {
    napi_async_work work;
    napi_deferred deferred;
    int fd_in, fd_out;
    int64_t off_in, off_out;
    uint64_t length, done;
    int err; /* errno of a failure, 0 when none */
} copy_job;

static void copy_execute(napi_env env, void *data) {
    (void) env;
    copy_job *j = (copy_job *) data;
#if defined(__linux__)
    loff_t in_off = (loff_t) j->off_in, out_off = (loff_t) j->off_out;
    uint64_t left = j->length;
    while (left > 0) {
        size_t want = left > (1u << 30) ? (1u << 30) : (size_t) left;
        ssize_t n = copy_file_range(j->fd_in, &in_off, j->fd_out, &out_off, want, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            j->err = errno;
            return;
        }
        if (n == 0) break; /* end of input */
        j->done += (uint64_t) n;
        left -= (uint64_t) n;
    }
#else
    j->err = 38; /* ENOSYS */
#endif
}

static void copy_complete(napi_env env, napi_status status, void *data) {
    copy_job *j = (copy_job *) data;
    napi_value value;
    if (status == napi_ok && j->err == 0) {
        if (napi_create_double(env, (double) j->done, &value) == napi_ok) napi_resolve_deferred(env, j->deferred, value);
    } else if (status == napi_ok && j->done == 0) {
        if (napi_create_double(env, -(double) j->err, &value) == napi_ok) napi_resolve_deferred(env, j->deferred, value);
    } else {
        char msg[96];
        napi_value code, text, error;
        snprintf(msg, sizeof msg, "copy_file_range failed after %llu bytes: %s", (unsigned long long) j->done, status == napi_ok ? strerror(j->err) : "cancelled");
        if (napi_create_string_utf8(env, "EIO", NAPI_AUTO_LENGTH, &code) == napi_ok && napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &text) == napi_ok &&
            napi_create_error(env, code, text, &error) == napi_ok) {
            napi_reject_deferred(env, j->deferred, error);
        }
    }
    napi_delete_async_work(env, j->work);
    free(j);
}

static napi_value copy_file_range_async_js(napi_env env, napi_callback_info info) {
    size_t argc = 5;
    napi_value argv[5], promise, name;
    double a[5];
    CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
    if (argc < 5) { napi_throw_type_error(env, NULL, "copyFileRangeAsync(fdIn, offIn, fdOut, offOut, length)"); return NULL; }
    if (!integer_args(env, argv, 5, 0, 9007199254740991.0, "copyFileRangeAsync: arguments must be non-negative integers", a)) return NULL;
    copy_job *j = (copy_job *) calloc(1, sizeof *j);
    if (j == NULL) { napi_throw_error(env, "ENOMEM", "copyFileRangeAsync: out of memory"); return NULL; }
    j->fd_in = (int) a[0];
    j->off_in = (int64_t) a[1];
    j->fd_out = (int) a[2];
    j->off_out = (int64_t) a[3];
    j->length = (uint64_t) a[4];
    if (napi_create_promise(env, &j->deferred, &promise) != napi_ok || napi_create_string_utf8(env, "copyFileRange", NAPI_AUTO_LENGTH, &name) != napi_ok ||
        napi_create_async_work(env, NULL, name, copy_execute, copy_complete, j, &j->work) != napi_ok) {
        free(j);
        napi_throw_error(env, NULL, "tensor_ops: N-API call failed");
        return NULL;
    }
    if (napi_queue_async_work(env, j->work) != napi_ok) {
        napi_delete_async_work(env, j->work);
        free(j);
        napi_throw_error(env, NULL, "tensor_ops: N-API call failed");
        return NULL;
    }
    return promise;
}

/*
 * cloneRange(fdIn, offIn, fdOut, offOut, length) -> 0 when the filesystem shared the extents
 * (FICLONERANGE: Btrfs, XFS with reflink), else -errno (ext4 and tmpfs refuse; offsets and
 * length must be multiples of the filesystem block size, except a length reaching the input's end).
 */
static napi_value clone_range_js(napi_env env, napi_callback_info info) {
    size_t argc = 5;
    napi_value argv[5], result;
    double a[5];
    CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
    if (argc < 5) { napi_throw_type_error(env, NULL, "cloneRange(fdIn, offIn, fdOut, offOut, length)"); return NULL; }
    if (!integer_args(env, argv, 5, 0, 9007199254740991.0, "cloneRange: arguments must be non-negative integers", a)) return NULL;
#if defined(__linux__) && defined(FICLONERANGE)
    struct file_clone_range r;
    r.src_fd = (int64_t) a[0];
    r.src_offset = (uint64_t) a[1];
    r.dest_offset = (uint64_t) a[3];
    r.src_length = (uint64_t) a[4];
    int rc = ioctl((int) a[2], FICLONERANGE, &r);
    CHECK(napi_create_double(env, rc == 0 ? 0.0 : -(double) errno, &result));
#else
    CHECK(napi_create_double(env, -95.0 /* EOPNOTSUPP */, &result));
#endif
    return result;
}

/*
 * resampleGrid(src: Float32Array, dst: Float32Array, e, sh, sw, dh, dw) -> true.
 * Bilinear, align-corners resample of a position grid [e, sh*sw] into [e, dh*dw], in the order
 * src/layout/arith.ts (and Ollama's loader) uses: coordinates in double, weights and blends in
 * float. Float products and sums are correctly rounded like JS's fround of the double result
 * (a double holds them exactly or rounds innocuously: 53 >= 2*24+2), and -ffp-contract=off keeps
 * the compiler from fusing them, so the output is bit-identical to the JS kernel.
 */
static double align_corners(int64_t t, int64_t to, int64_t from) {
    return to <= 1 ? 0.0 : (double) (t * (from - 1)) / (double) (to - 1);
}

static void resample_grid(const float *src, float *dst, int64_t e, int64_t sh, int64_t sw, int64_t dh, int64_t dw) {
    for (int64_t y = 0; y < dh; y++) {
        const double sy = align_corners(y, dh, sh);
        const int64_t y0 = (int64_t) sy /* floor: sy >= 0 */, y1 = y0 + 1 < sh ? y0 + 1 : sh - 1;
        const float wy = (float) (sy - (double) y0), wy1 = (float) (1.0 - (double) wy);
        for (int64_t x = 0; x < dw; x++) {
            const double sx = align_corners(x, dw, sw);
            const int64_t x0 = (int64_t) sx, x1 = x0 + 1 < sw ? x0 + 1 : sw - 1;
            const float wx = (float) (sx - (double) x0), wx1 = (float) (1.0 - (double) wx);
            const float *p00 = src + (y0 * sw + x0) * e, *p01 = src + (y0 * sw + x1) * e;
            const float *p10 = src + (y1 * sw + x0) * e, *p11 = src + (y1 * sw + x1) * e;
            float *o = dst + (y * dw + x) * e;
            for (int64_t k = 0; k < e; k++) {
                const float top = p00[k] * wx1 + p01[k] * wx;
                const float bottom = p10[k] * wx1 + p11[k] * wx;
                o[k] = top * wy1 + bottom * wy;
            }
        }
    }
}

static napi_value resample_grid_js(napi_env env, napi_callback_info info) {
    size_t argc = 7;
    napi_value argv[7], result;
    double d[5];
    CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
    if (argc < 7) { napi_throw_type_error(env, NULL, "resampleGrid(src, dst, e, sh, sw, dh, dw)"); return NULL; }
    if (!integer_args(env, argv + 2, 5, 1, 2147483647.0, "resampleGrid: sizes must be positive integers", d)) return NULL;
    size_t slen, dlen;
    void *sdata, *ddata;
    const int64_t e = (int64_t) d[0], sh = (int64_t) d[1], sw = (int64_t) d[2], dh = (int64_t) d[3], dw = (int64_t) d[4];
    if (!typed_array_of(env, argv[0], napi_float32_array, &sdata, &slen) || !typed_array_of(env, argv[1], napi_float32_array, &ddata, &dlen) ||
        (int64_t) slen != e * sh * sw || (int64_t) dlen != e * dh * dw) {
        napi_throw_range_error(env, NULL, "resampleGrid: Float32Arrays of e*sh*sw and e*dh*dw values expected");
        return NULL;
    }
    resample_grid((const float *) sdata, (float *) ddata, e, sh, sw, dh, dw);
    CHECK(napi_get_boolean(env, 1, &result));
    return result;
}

/*
 * walkShortStrings(bytes: Uint8Array, q, i, n, stop, out: Float64Array) -> undefined.
 * @compat/gguf's walk over a string array's items (a vocabulary), little-endian: from the item
 * i whose u64 length prefix is at bytes[q], step over items while i < n, the item is short
 * (length < 0x80, high word 0) and wholly before `stop`. Writes the position and the item it
 * stopped at to out[0] and out[1]. The same loop as the parser's JavaScript walk, which runs
 * interpreted on a cold start: about 10 ms for a 262,144-token vocabulary on the bench machine.
 */
static napi_value walk_short_strings_js(napi_env env, napi_callback_info info) {
    size_t argc = 6;
    napi_value argv[6];
    double a[4];
    CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
    if (argc < 6) { napi_throw_type_error(env, NULL, "walkShortStrings(bytes, q, i, n, stop, out)"); return NULL; }
    size_t blen, olen;
    void *bdata, *odata;
    if (!typed_array_of(env, argv[0], napi_uint8_array, &bdata, &blen) || !typed_array_of(env, argv[5], napi_float64_array, &odata, &olen) || olen < 2) {
        napi_throw_type_error(env, NULL, "walkShortStrings expects a Uint8Array and a Float64Array of 2");
        return NULL;
    }
    if (!integer_args(env, argv + 1, 4, 0, 9007199254740991.0, "walkShortStrings: positions and counts must be non-negative integers", a)) return NULL;
    const uint8_t *b = (const uint8_t *) bdata;
    uint64_t q = (uint64_t) a[0], i = (uint64_t) a[1], n = (uint64_t) a[2], stop = (uint64_t) a[3];
    if (stop > blen) stop = blen;
    while (i < n && q + 8 <= stop) {
        uint32_t len = (uint32_t) b[q] | (uint32_t) b[q + 1] << 8 | (uint32_t) b[q + 2] << 16 | (uint32_t) b[q + 3] << 24;
        uint64_t next = q + 8 + len;
        if (len >= 0x80 || next > stop || (b[q + 4] | b[q + 5] | b[q + 6] | b[q + 7]) != 0) break;
        q = next;
        i++;
    }
    ((double *) odata)[0] = (double) q;
    ((double *) odata)[1] = (double) i;
    return NULL;
}

/*
 * largeBuffer(bytes) -> a zero-filled ArrayBuffer of `bytes` in memory of its own, the kernel asked
 * to back it with transparent huge pages (madvise MADV_HUGEPAGE), or null where it cannot (not
 * Linux, no memory, no external buffers). A computed tensor's tens of MiB are written once right
 * after they are allocated: in 4 KiB pages each page's first touch is a fault (on a guest whose
 * page tables the host shadows, ~15 us apiece: 0.1 s for 38 MiB), in 2 MiB pages 19 of them.
 */
#if defined(__linux__)
#define HUGE_PAGE ((size_t) 2 << 20)
static void unmap_large(napi_env env, void *data, void *hint) {
    int64_t total;
    munmap(data, (size_t) (uintptr_t) hint);
    (void) napi_adjust_external_memory(env, -(int64_t) (uintptr_t) hint, &total);
}
#endif

static napi_value large_buffer_js(napi_env env, napi_callback_info info) {
    size_t argc = 1;
    napi_value argv[1], result;
    double bytes;
    CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
    if (argc < 1) { napi_throw_type_error(env, NULL, "largeBuffer(bytes)"); return NULL; }
    if (!integer_args(env, argv, 1, 1, 9007199254740991.0, "largeBuffer: bytes must be a positive integer", &bytes)) return NULL;
#if defined(__linux__)
    /* whole huge pages from a huge-page boundary (only aligned 2 MiB stretches can be huge):
     * one huge page more is mapped, and the slack before the boundary and after the end unmapped */
    size_t mapped = ((size_t) bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    char *raw = mmap(NULL, mapped + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw != MAP_FAILED) {
        char *p = (char *) (((uintptr_t) raw + HUGE_PAGE - 1) & ~(uintptr_t) (HUGE_PAGE - 1));
        size_t head = (size_t) (p - raw);
        if (head > 0) munmap(raw, head);
        if (HUGE_PAGE - head > 0) munmap(p + mapped, HUGE_PAGE - head);
        (void) madvise(p, mapped, MADV_HUGEPAGE); /* advice: refused (THP off), the pages are small */
        if (napi_create_external_arraybuffer(env, p, (size_t) bytes, unmap_large, (void *) (uintptr_t) mapped, &result) == napi_ok) {
            /* V8 sees a small object: told the mapping's size, its collector frees these as it
             * would as many bytes of its own (a long-lived serve or mount computes GiBs over time) */
            int64_t total;
            (void) napi_adjust_external_memory(env, (int64_t) mapped, &total);
            return result;
        }
        /* refused (napi_no_external_buffers_allowed in an Electron sandbox): the caller allocates */
        munmap(p, mapped);
    }
#endif
    CHECK(napi_get_null(env, &result));
    return result;
}

static napi_value init(napi_env env, napi_value exports) {
    select_kernels(1);
    napi_property_descriptor props[] = {
        {"toF32", NULL, to_f32, NULL, NULL, NULL, napi_default, NULL},
        {"types", NULL, types, NULL, NULL, NULL, napi_default, NULL},
        {"isa", NULL, isa, NULL, NULL, NULL, napi_default, NULL},
        {"setIsa", NULL, set_isa, NULL, NULL, NULL, napi_default, NULL},
        {"copyFileRange", NULL, copy_file_range_js, NULL, NULL, NULL, napi_default, NULL},
        {"copyFileRangeAsync", NULL, copy_file_range_async_js, NULL, NULL, NULL, napi_default, NULL},
        {"cloneRange", NULL, clone_range_js, NULL, NULL, NULL, napi_default, NULL},
        {"resampleGrid", NULL, resample_grid_js, NULL, NULL, NULL, napi_default, NULL},
        {"largeBuffer", NULL, large_buffer_js, NULL, NULL, NULL, napi_default, NULL},
        {"walkShortStrings", NULL, walk_short_strings_js, NULL, NULL, NULL, napi_default, NULL},
    };
    CHECK(napi_define_properties(env, exports, sizeof props / sizeof props[0], props));
    return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
