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
#include <stdint.h>
#include <stddef.h>
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(name)))

static inline uint32_t bits_of(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); return u; }
static inline float float_of(uint32_t u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
static inline uint16_t rd16(const uint8_t *p) { return (uint16_t) (p[0] | (p[1] << 8)); }

/* One f16 -> f32, bit-exact (same results as half.ts f16BitsToF32Bits). */
static inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t) (h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    if (exp == 0x1F) return float_of(sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0));
    if (exp != 0) return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
    /* subnormal or zero: (0.5 + mant * 2^-24) - 0.5 is exact */
    return float_of(sign | bits_of(float_of(mant | (126u << 23)) - 0.5f));
}

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

static const int8_t FP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static inline float e8m0_half(uint8_t e) {
    return float_of(e < 2 ? (0x00200000u << e) : ((uint32_t) (e - 1) << 23));
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

static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
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

/*
 * The remaining types the native addon covers, as plain loops (clang vectorizes them with simd128).
 * Same arithmetic and order as the JS kernels.
 */
static const int8_t IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

EXPORT("q4_0") void q4_0(const uint8_t *src, float *dst, size_t nb) {
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = src + 18 * i;
        const float d = half_to_float(rd16(b));
        float *y = dst + 32 * i;
        for (int j = 0; j < 16; j++) {
            y[j] = ((b[2 + j] & 0xF) - 8) * d;
            y[j + 16] = ((b[2 + j] >> 4) - 8) * d;
        }
    }
}

EXPORT("q4_1") void q4_1(const uint8_t *src, float *dst, size_t nb) {
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = src + 20 * i;
        const float d = half_to_float(rd16(b)), m = half_to_float(rd16(b + 2));
        float *y = dst + 32 * i;
        for (int j = 0; j < 16; j++) {
            y[j] = (b[4 + j] & 0xF) * d + m;
            y[j + 16] = (b[4 + j] >> 4) * d + m;
        }
    }
}

EXPORT("q5_0") void q5_0(const uint8_t *src, float *dst, size_t nb) {
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = src + 22 * i;
        const float d = half_to_float(rd16(b));
        const uint32_t qh = b[2] | (b[3] << 8) | (b[4] << 16) | ((uint32_t) b[5] << 24);
        float *y = dst + 32 * i;
        for (int j = 0; j < 16; j++) {
            const int x0 = ((b[6 + j] & 0xF) | (((qh >> j) << 4) & 0x10)) - 16;
            const int x1 = ((b[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            y[j] = x0 * d;
            y[j + 16] = x1 * d;
        }
    }
}

EXPORT("q5_1") void q5_1(const uint8_t *src, float *dst, size_t nb) {
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = src + 24 * i;
        const float d = half_to_float(rd16(b)), m = half_to_float(rd16(b + 2));
        const uint32_t qh = b[4] | (b[5] << 8) | (b[6] << 16) | ((uint32_t) b[7] << 24);
        float *y = dst + 32 * i;
        for (int j = 0; j < 16; j++) {
            const int x0 = (b[8 + j] & 0xF) | (((qh >> j) << 4) & 0x10);
            const int x1 = (b[8 + j] >> 4) | ((qh >> (j + 12)) & 0x10);
            y[j] = x0 * d + m;
            y[j + 16] = x1 * d + m;
        }
    }
}

EXPORT("q5_k") void q5_k(const uint8_t *src, float *dst, size_t nb) {
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = src + 176 * i;
        const float d = half_to_float(rd16(b));
        const float dmin = half_to_float(rd16(b + 2));
        const uint8_t *qh = b + 16, *ql = b + 48;
        float *y = dst + 256 * i;
        uint8_t u1 = 1, u2 = 2;
        for (int is = 0; is < 8; is += 2, ql += 32, y += 64, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            scale_min_k4(is, b + 4, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(is + 1, b + 4, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) y[l] = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) y[32 + l] = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

EXPORT("iq4_nl") void iq4_nl(const uint8_t *src, float *dst, size_t nb) {
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = src + 18 * i;
        const float d = half_to_float(rd16(b));
        float *y = dst + 32 * i;
        for (int j = 0; j < 16; j++) {
            y[j] = d * IQ4NL[b[2 + j] & 0xF];
            y[j + 16] = d * IQ4NL[b[2 + j] >> 4];
        }
    }
}

EXPORT("iq4_xs") void iq4_xs(const uint8_t *src, float *dst, size_t nb) {
    for (size_t i = 0; i < nb; i++) {
        const uint8_t *b = src + 136 * i;
        const float d = half_to_float(rd16(b));
        const uint16_t sh = rd16(b + 2);
        float *y = dst + 256 * i;
        for (int ib = 0; ib < 8; ib++, y += 32) {
            const int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 0xF) | (((sh >> 2 * ib) & 3) << 4);
            const float dl = d * (ls - 32);
            const uint8_t *qs = b + 8 + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * IQ4NL[qs[j] & 0xF];
                y[j + 16] = dl * IQ4NL[qs[j] >> 4];
            }
        }
    }
}
