/*
 * The C both compiled tiers share: native/tensor_ops.c (the N-API addon) and wasm/kernels.c
 * (WebAssembly) include this file, so a helper or a plain-loop kernel exists once and the two
 * tiers cannot drift apart. Every kernel computes what the JS kernels compute (src/dequant/): the
 * same f32 operations in the same order. Freestanding C99 (the WASM build has no libc): only
 * <stdint.h>, <stddef.h> and compiler builtins.
 */
#ifndef TOPS_KERNELS_H
#define TOPS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

static inline uint32_t bits_of(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); return u; }
static inline float float_of(uint32_t u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
static inline uint16_t rd16(const uint8_t *p) { return (uint16_t) (p[0] | (p[1] << 8)); }

/*
 * One f16 -> f32, bit-exact (same results as src/half.ts f16BitsToF32Bits). Inf and NaN take an
 * integer path that keeps the payload and sets the quiet bit, as ggml's float multiply does on
 * x86 and AArch64: WebAssembly leaves the payload of an arithmetic NaN unspecified.
 */
static inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t) (h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    if (exp == 0x1F) return float_of(sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0));
    if (exp != 0) return float_of(sign | ((exp + 112u) << 23) | (mant << 13));
    /* subnormal or zero: (0.5 + mant * 2^-24) - 0.5 is exact */
    return float_of(sign | bits_of(float_of(mant | (126u << 23)) - 0.5f));
}

static const int8_t IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const int8_t FP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* MXFP4's E8M0 block scale, halved (the FP4 table holds doubled values), built from bits. */
static inline float e8m0_half(uint8_t e) {
    return float_of(e < 2 ? (0x00200000u << e) : ((uint32_t) (e - 1) << 23));
}

/* The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (ggml's get_scale_min_k4). */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/*
 * The plain-loop kernels, one per type, as `<type>_SUFFIX(src, dst, n)`: n values for F16/BF16,
 * n blocks for the rest. The includer instantiates them once per instruction set (ATTR: a target
 * attribute, or nothing); the compiler vectorizes the loops for that set.
 */
#define DEFINE_PLAIN_KERNELS(SUFFIX, ATTR)                                                            \
    ATTR __attribute__((unused)) static void f16_##SUFFIX(const uint8_t *src, float *dst, size_t n) {                     \
        for (size_t i = 0; i < n; i++) dst[i] = half_to_float(rd16(src + 2 * i));                  \
    }                                                                                             \
    ATTR __attribute__((unused)) static void bf16_##SUFFIX(const uint8_t *src, float *dst, size_t n) {                    \
        uint32_t *out = (uint32_t *) dst;                                                         \
        for (size_t i = 0; i < n; i++) out[i] = (uint32_t) rd16(src + 2 * i) << 16;                \
    }                                                                                             \
    ATTR __attribute__((unused)) static void q8_0_##SUFFIX(const uint8_t *src, float *dst, size_t nb) {                   \
        for (size_t i = 0; i < nb; i++) {                                                         \
            const uint8_t *b = src + 34 * i;                                                      \
            const float d = half_to_float(rd16(b));                                               \
            const int8_t *q = (const int8_t *) (b + 2);                                           \
            float *y = dst + 32 * i;                                                              \
            for (int j = 0; j < 32; j++) y[j] = q[j] * d;                                         \
        }                                                                                         \
    }                                                                                             \
    ATTR __attribute__((unused)) static void mxfp4_##SUFFIX(const uint8_t *src, float *dst, size_t nb) {                  \
        for (size_t i = 0; i < nb; i++) {                                                         \
            const uint8_t *b = src + 17 * i;                                                      \
            const float d = e8m0_half(b[0]);                                                      \
            float *y = dst + 32 * i;                                                              \
            for (int j = 0; j < 16; j++) {                                                        \
                y[j] = FP4[b[1 + j] & 0xF] * d;                                                   \
                y[j + 16] = FP4[b[1 + j] >> 4] * d;                                               \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    ATTR __attribute__((unused)) static void q4_k_##SUFFIX(const uint8_t *src, float *dst, size_t nb) {                   \
        for (size_t i = 0; i < nb; i++) {                                                         \
            const uint8_t *b = src + 144 * i;                                                     \
            const float d = half_to_float(rd16(b));                                               \
            const float dmin = half_to_float(rd16(b + 2));                                        \
            const uint8_t *q = b + 16;                                                            \
            float *y = dst + 256 * i;                                                             \
            for (int is = 0; is < 8; is += 2, q += 32, y += 64) {                                 \
                uint8_t sc, m;                                                                    \
                scale_min_k4(is, b + 4, &sc, &m);                                                 \
                const float d1 = d * sc, m1 = dmin * m;                                           \
                scale_min_k4(is + 1, b + 4, &sc, &m);                                             \
                const float d2 = d * sc, m2 = dmin * m;                                           \
                for (int l = 0; l < 32; l++) y[l] = d1 * (q[l] & 0xF) - m1;                       \
                for (int l = 0; l < 32; l++) y[32 + l] = d2 * (q[l] >> 4) - m2;                   \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    ATTR __attribute__((unused)) static void q4_0_##SUFFIX(const uint8_t *src, float *dst, size_t nb) { \
        for (size_t i = 0; i < nb; i++) {                                                         \
            const uint8_t *b = src + 18 * i;                                                      \
            const float d = half_to_float(rd16(b));                                               \
            float *y = dst + 32 * i;                                                              \
            for (int j = 0; j < 16; j++) {                                                        \
                y[j] = ((b[2 + j] & 0xF) - 8) * d;                                                \
                y[j + 16] = ((b[2 + j] >> 4) - 8) * d;                                            \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    ATTR __attribute__((unused)) static void q4_1_##SUFFIX(const uint8_t *src, float *dst, size_t nb) { \
        for (size_t i = 0; i < nb; i++) {                                                         \
            const uint8_t *b = src + 20 * i;                                                      \
            const float d = half_to_float(rd16(b)), m = half_to_float(rd16(b + 2));               \
            float *y = dst + 32 * i;                                                              \
            for (int j = 0; j < 16; j++) {                                                        \
                y[j] = (b[4 + j] & 0xF) * d + m;                                                  \
                y[j + 16] = (b[4 + j] >> 4) * d + m;                                              \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    ATTR __attribute__((unused)) static void q5_0_##SUFFIX(const uint8_t *src, float *dst, size_t nb) { \
        for (size_t i = 0; i < nb; i++) {                                                         \
            const uint8_t *b = src + 22 * i;                                                      \
            const float d = half_to_float(rd16(b));                                               \
            const uint32_t qh = b[2] | (b[3] << 8) | (b[4] << 16) | ((uint32_t) b[5] << 24);      \
            float *y = dst + 32 * i;                                                              \
            for (int j = 0; j < 16; j++) {                                                        \
                const int x0 = ((b[6 + j] & 0xF) | (((qh >> j) << 4) & 0x10)) - 16;               \
                const int x1 = ((b[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;                \
                y[j] = x0 * d;                                                                    \
                y[j + 16] = x1 * d;                                                               \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    ATTR __attribute__((unused)) static void q5_1_##SUFFIX(const uint8_t *src, float *dst, size_t nb) { \
        for (size_t i = 0; i < nb; i++) {                                                         \
            const uint8_t *b = src + 24 * i;                                                      \
            const float d = half_to_float(rd16(b)), m = half_to_float(rd16(b + 2));               \
            const uint32_t qh = b[4] | (b[5] << 8) | (b[6] << 16) | ((uint32_t) b[7] << 24);      \
            float *y = dst + 32 * i;                                                              \
            for (int j = 0; j < 16; j++) {                                                        \
                const int x0 = (b[8 + j] & 0xF) | (((qh >> j) << 4) & 0x10);                      \
                const int x1 = (b[8 + j] >> 4) | ((qh >> (j + 12)) & 0x10);                       \
                y[j] = x0 * d + m;                                                                \
                y[j + 16] = x1 * d + m;                                                           \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    ATTR __attribute__((unused)) static void q5_k_##SUFFIX(const uint8_t *src, float *dst, size_t nb) { \
        for (size_t i = 0; i < nb; i++) {                                                         \
            const uint8_t *b = src + 176 * i;                                                     \
            const float d = half_to_float(rd16(b));                                               \
            const float dmin = half_to_float(rd16(b + 2));                                        \
            const uint8_t *qh = b + 16, *ql = b + 48;                                             \
            float *y = dst + 256 * i;                                                             \
            uint8_t u1 = 1, u2 = 2;                                                               \
            for (int is = 0; is < 8; is += 2, ql += 32, y += 64, u1 <<= 2, u2 <<= 2) {            \
                uint8_t sc, m;                                                                    \
                scale_min_k4(is, b + 4, &sc, &m);                                                 \
                const float d1 = d * sc, m1 = dmin * m;                                           \
                scale_min_k4(is + 1, b + 4, &sc, &m);                                             \
                const float d2 = d * sc, m2 = dmin * m;                                           \
                for (int l = 0; l < 32; l++) y[l] = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1; \
                for (int l = 0; l < 32; l++) y[32 + l] = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2; \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    ATTR __attribute__((unused)) static void iq4_nl_##SUFFIX(const uint8_t *src, float *dst, size_t nb) { \
        for (size_t i = 0; i < nb; i++) {                                                         \
            const uint8_t *b = src + 18 * i;                                                      \
            const float d = half_to_float(rd16(b));                                               \
            float *y = dst + 32 * i;                                                              \
            for (int j = 0; j < 16; j++) {                                                        \
                y[j] = d * IQ4NL[b[2 + j] & 0xF];                                                 \
                y[j + 16] = d * IQ4NL[b[2 + j] >> 4];                                             \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    ATTR __attribute__((unused)) static void iq4_xs_##SUFFIX(const uint8_t *src, float *dst, size_t nb) { \
        for (size_t i = 0; i < nb; i++) {                                                         \
            const uint8_t *b = src + 136 * i;                                                     \
            const float d = half_to_float(rd16(b));                                               \
            const uint16_t sh = rd16(b + 2);                                                      \
            float *y = dst + 256 * i;                                                             \
            for (int ib = 0; ib < 8; ib++, y += 32) {                                             \
                const int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 0xF) | (((sh >> 2 * ib) & 3) << 4); \
                const float dl = d * (ls - 32);                                                   \
                const uint8_t *qs = b + 8 + 16 * ib;                                              \
                for (int j = 0; j < 16; j++) {                                                    \
                    y[j] = dl * IQ4NL[qs[j] & 0xF];                                               \
                    y[j + 16] = dl * IQ4NL[qs[j] >> 4];                                           \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
    ATTR __attribute__((unused)) static void q6_k_##SUFFIX(const uint8_t *src, float *dst, size_t nb) { \
        /* Same arithmetic as ggml ((d * scale) * q), loops ordered so each 16-value run shares a scale. */ \
        for (size_t i = 0; i < nb; i++) {                                                         \
            const uint8_t *b = src + 210 * i;                                                     \
            const float d = half_to_float(rd16(b + 208));                                         \
            float *y = dst + 256 * i;                                                             \
            for (int n = 0; n < 2; n++, y += 128) {                                               \
                const uint8_t *ql = b + 64 * n;                                                   \
                const uint8_t *qh = b + 128 + 32 * n;                                             \
                const int8_t *sc = (const int8_t *) (b + 192 + 8 * n);                            \
                for (int part = 0; part < 4; part++) {                                            \
                    const uint8_t *lo = ql + (part & 1) * 32;                                     \
                    const int lshift = (part >> 1) * 4, hshift = part * 2;                        \
                    for (int half = 0; half < 2; half++) {                                        \
                        const float s = d * sc[half + 2 * part];                                  \
                        float *yy = y + part * 32 + half * 16;                                    \
                        for (int l = half * 16, k = 0; k < 16; l++, k++) {                        \
                            const int q = (((lo[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32; \
                            yy[k] = s * q;                                                        \
                        }                                                                         \
                    }                                                                             \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
    }

#endif
