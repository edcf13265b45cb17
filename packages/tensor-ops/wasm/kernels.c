/*
 * WebAssembly SIMD kernels for @compat/tensor-ops (C99, no libc; built by scripts/build-wasm.mjs with
 * clang --target=wasm32 -msimd128). Each kernel computes exactly what the JS and native kernels compute:
 * the same f32 operations in the same order. wasm has no fused multiply-add in its base SIMD set, so no
 * contraction can change a rounding. NaN payloads are produced by integer code, never by float
 * arithmetic, because wasm leaves the payload of an arithmetic NaN unspecified.
 *
 * Calling convention: JS copies the source blocks to `src`, calls the kernel, and reads `n` f32 values
 * back from `dst` (both inside this module's memory, laid out by the JS side after __heap_base).
 */
#include <wasm_simd128.h>
#include "../native/kernels.h"

#define EXPORT(name) __attribute__((export_name(name)))

DEFINE_PLAIN_KERNELS(plain, )

/* Four f16 values (low 16 bits of each lane) -> four f32 bit patterns. */
static inline v128_t half4_to_float4(v128_t h) {
    const v128_t sign = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x8000)), 16);
    const v128_t two_w = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x7FFF)), 17);
    /* normal: exponent rebias by a multiply that is exact for every finite normal half */
    const v128_t normal = wasm_f32x4_mul(wasm_i32x4_add(wasm_u32x4_shr(two_w, 4), wasm_i32x4_splat(0xE0 << 23)),
                                         wasm_f32x4_splat(0x1.0p-112f));
    /* subnormal: (0.5 + mant * 2^-24) - 0.5, exact; zero gives +0 (sign added below) */
    const v128_t denorm = wasm_f32x4_sub(wasm_v128_or(wasm_u32x4_shr(two_w, 17), wasm_i32x4_splat(126 << 23)),
                                         wasm_f32x4_splat(0.5f));
    const v128_t is_small = wasm_u32x4_lt(two_w, wasm_i32x4_splat(1 << 27));
    /* Inf/NaN (exponent 31): integer path, payload kept and the quiet bit set for NaN */
    const v128_t mant = wasm_v128_and(h, wasm_i32x4_splat(0x3FF));
    const v128_t is_special = wasm_i32x4_eq(wasm_v128_and(h, wasm_i32x4_splat(0x7C00)), wasm_i32x4_splat(0x7C00));
    const v128_t quiet = wasm_v128_andnot(wasm_i32x4_splat(0x400000), wasm_i32x4_eq(mant, wasm_i32x4_splat(0)));
    const v128_t special = wasm_v128_or(wasm_v128_or(wasm_i32x4_splat(0x7F800000), wasm_i32x4_shl(mant, 13)), quiet);
    v128_t r = wasm_v128_bitselect(denorm, normal, is_small);
    r = wasm_v128_bitselect(special, r, is_special);
    return wasm_v128_or(sign, r);
}

EXPORT("f16") void f16(const uint8_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const v128_t h = wasm_v128_load(src + 2 * i);
        wasm_v128_store(dst + i, half4_to_float4(wasm_u32x4_extend_low_u16x8(h)));
        wasm_v128_store(dst + i + 4, half4_to_float4(wasm_u32x4_extend_high_u16x8(h)));
    }
    for (; i < n; i++) dst[i] = half_to_float(rd16(src + 2 * i));
}

EXPORT("bf16") void bf16(const uint8_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const v128_t h = wasm_v128_load(src + 2 * i);
        wasm_v128_store(dst + i, wasm_i32x4_shl(wasm_u32x4_extend_low_u16x8(h), 16));
        wasm_v128_store(dst + i + 4, wasm_i32x4_shl(wasm_u32x4_extend_high_u16x8(h), 16));
    }
    uint32_t *out = (uint32_t *) dst;
    for (; i < n; i++) out[i] = (uint32_t) rd16(src + 2 * i) << 16;
}

/* 16 signed bytes -> 16 floats (exact) each multiplied by d (one rounding, as in ggml). */
static inline void store_i8x16_scaled(float *y, v128_t q, v128_t d) {
    const v128_t lo = wasm_i16x8_extend_low_i8x16(q), hi = wasm_i16x8_extend_high_i8x16(q);
    wasm_v128_store(y, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(wasm_i32x4_extend_low_i16x8(lo)), d));
    wasm_v128_store(y + 4, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(wasm_i32x4_extend_high_i16x8(lo)), d));
    wasm_v128_store(y + 8, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(wasm_i32x4_extend_low_i16x8(hi)), d));
    wasm_v128_store(y + 12, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(wasm_i32x4_extend_high_i16x8(hi)), d));
}

EXPORT("q8_0") void q8_0(const uint8_t *src, float *dst, size_t nb) {
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = src + 34 * i;
        const v128_t d = wasm_f32x4_splat(half_to_float(rd16(b)));
        store_i8x16_scaled(dst + 32 * i, wasm_v128_load(b + 2), d);
        store_i8x16_scaled(dst + 32 * i + 16, wasm_v128_load(b + 18), d);
    }
}

/* MXFP4: the 16-entry codebook lookup is one swizzle per 16 nibbles. */
EXPORT("mxfp4") void mxfp4(const uint8_t *src, float *dst, size_t nb) {
    const v128_t table = wasm_v128_load(FP4);
    const v128_t low4 = wasm_i8x16_splat(0x0F);
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = src + 17 * i;
        const v128_t d = wasm_f32x4_splat(e8m0_half(b[0]));
        const v128_t q = wasm_v128_load(b + 1);
        store_i8x16_scaled(dst + 32 * i, wasm_i8x16_swizzle(table, wasm_v128_and(q, low4)), d);
        store_i8x16_scaled(dst + 32 * i + 16, wasm_i8x16_swizzle(table, wasm_u8x16_shr(q, 4)), d);
    }
}

/* 16 unsigned nibble values (0..15 in bytes) -> y = d1 * q - m1, 16 floats. */
static inline void store_u8x16_affine(float *y, v128_t q, v128_t d, v128_t m) {
    const v128_t lo = wasm_u16x8_extend_low_u8x16(q), hi = wasm_u16x8_extend_high_u8x16(q);
    const v128_t parts[4] = {wasm_u32x4_extend_low_u16x8(lo), wasm_u32x4_extend_high_u16x8(lo),
                             wasm_u32x4_extend_low_u16x8(hi), wasm_u32x4_extend_high_u16x8(hi)};
    for (int k = 0; k < 4; k++)
        wasm_v128_store(y + 4 * k, wasm_f32x4_sub(wasm_f32x4_mul(d, wasm_f32x4_convert_i32x4(parts[k])), m));
}

EXPORT("q4_k") void q4_k(const uint8_t *src, float *dst, size_t nb) {
    const v128_t low4 = wasm_i8x16_splat(0x0F);
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = src + 144 * i;
        const float d = half_to_float(rd16(b));
        const float dmin = half_to_float(rd16(b + 2));
        const uint8_t *q = b + 16;
        float *y = dst + 256 * i;
        for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
            uint8_t sc, m;
            scale_min_k4(is, b + 4, &sc, &m);
            const v128_t d1 = wasm_f32x4_splat(d * sc), m1 = wasm_f32x4_splat(dmin * m);
            scale_min_k4(is + 1, b + 4, &sc, &m);
            const v128_t d2 = wasm_f32x4_splat(d * sc), m2 = wasm_f32x4_splat(dmin * m);
            for (int l = 0; l < 32; l += 16) {
                const v128_t v = wasm_v128_load(q + l);
                store_u8x16_affine(y + l, wasm_v128_and(v, low4), d1, m1);
                store_u8x16_affine(y + 32 + l, wasm_u8x16_shr(v, 4), d2, m2);
            }
        }
    }
}

/* Q6_K: ((d * scale) * q) per 16-value run, as ggml computes it. */
EXPORT("q6_k") void q6_k(const uint8_t *src, float *dst, size_t nb) {
    const v128_t low4 = wasm_i8x16_splat(0x0F), three = wasm_i8x16_splat(3), bias = wasm_i8x16_splat(32);
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = src + 210 * i;
        const float d = half_to_float(rd16(b + 208));
        float *y = dst + 256 * i;
        for (int n = 0; n < 2; n++, y += 128) {
            const uint8_t *ql = b + 64 * n;
            const uint8_t *qh = b + 128 + 32 * n;
            const int8_t *sc = (const int8_t *) (b + 192 + 8 * n);
            for (int part = 0; part < 4; part++) {
                const uint8_t *lo = ql + (part & 1) * 32;
                const int lshift = (part >> 1) * 4, hshift = part * 2;
                for (int half = 0; half < 2; half++) {
                    const v128_t s = wasm_f32x4_splat(d * sc[half + 2 * part]);
                    const v128_t l4 = wasm_v128_and(wasm_u8x16_shr(wasm_v128_load(lo + 16 * half), lshift), low4);
                    const v128_t h2 = wasm_v128_and(wasm_u8x16_shr(wasm_v128_load(qh + 16 * half), hshift), three);
                    const v128_t q = wasm_i8x16_sub(wasm_v128_or(l4, wasm_i8x16_shl(h2, 4)), bias);
                    store_i8x16_scaled(y + part * 32 + half * 16, q, s);
                }
            }
        }
    }
}

/* The remaining types the native addon covers: the shared plain loops (native/kernels.h), which clang
 * vectorizes with simd128. */
#define PLAIN_EXPORT(name)                                                                        \
    EXPORT(#name) void name(const uint8_t *src, float *dst, size_t nb) { name##_plain(src, dst, nb); }
PLAIN_EXPORT(q4_0)
PLAIN_EXPORT(q4_1)
PLAIN_EXPORT(q5_0)
PLAIN_EXPORT(q5_1)
PLAIN_EXPORT(q5_k)
PLAIN_EXPORT(iq4_nl)
PLAIN_EXPORT(iq4_xs)
