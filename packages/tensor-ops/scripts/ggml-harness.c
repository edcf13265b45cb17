/*
 * Tiny driver around the prebuilt libggml-base used to produce reference vectors.
 * It is compiled and run by scripts/gen-vectors.ts; the binary is never committed.
 *
 *   harness info                      one line per type: id name blck_size type_size has_to_float
 *   harness deq   TYPE N  <in >out    to_float over N elements of raw TYPE bytes
 *   harness quant TYPE N  <in >out    N f32 values -> TYPE bytes (ggml_quantize_chunk, one row)
 *   harness from  TYPE N  <in >out    N f32 values -> TYPE bytes via from_float_ref (F16, BF16, Q8_K)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"

/* Q8_K's to_float lives in the CPU backend's traits; the base library still exports the row function. */
void dequantize_row_q8_K(const void *x, float *y, int64_t k);
void quantize_row_q8_K_ref(const float *x, void *y, int64_t k);

static void *read_all(size_t want) {
    void *buf = malloc(want ? want : 1);
    if (!buf || fread(buf, 1, want, stdin) != want) { fprintf(stderr, "short input\n"); exit(2); }
    return buf;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "info") == 0) {
        for (int t = 0; t < GGML_TYPE_COUNT; t++) {
            const struct ggml_type_traits *tr = ggml_get_type_traits((enum ggml_type) t);
            if (!tr || !tr->type_name || tr->blck_size == 0) continue;
            printf("%d %s %lld %zu %d\n", t, tr->type_name, (long long) tr->blck_size, tr->type_size, tr->to_float != NULL);
        }
        return 0;
    }
    if (argc < 4) { fprintf(stderr, "usage: harness info|deq|quant|from TYPE N\n"); return 2; }
    const enum ggml_type type = (enum ggml_type) atoi(argv[2]);
    const int64_t n = atoll(argv[3]);
    const struct ggml_type_traits *tr = ggml_get_type_traits(type);
    const size_t nbytes = ggml_row_size(type, n);

    if (strcmp(argv[1], "deq") == 0) {
        void *src = read_all(nbytes);
        float *dst = malloc(sizeof(float) * (size_t) n);
        if (type == GGML_TYPE_Q8_K) dequantize_row_q8_K(src, dst, n);
        else if (tr->to_float) tr->to_float(src, dst, n);
        else { fprintf(stderr, "no to_float\n"); return 3; }
        fwrite(dst, sizeof(float), (size_t) n, stdout);
        return 0;
    }
    float *src = read_all(sizeof(float) * (size_t) n);
    void *dst = calloc(1, nbytes);
    if (type == GGML_TYPE_Q8_K) {
        quantize_row_q8_K_ref(src, dst, n);
    } else if (strcmp(argv[1], "from") == 0) {
        if (!tr->from_float_ref) { fprintf(stderr, "no from_float_ref\n"); return 3; }
        tr->from_float_ref(src, dst, n);
    } else if (strcmp(argv[1], "quant") == 0) {
        float *imatrix = NULL;
        if (ggml_quantize_requires_imatrix(type)) {
            imatrix = malloc(sizeof(float) * (size_t) n);
            for (int64_t i = 0; i < n; i++) imatrix[i] = 1.0f;
        }
        ggml_quantize_init(type);
        ggml_quantize_chunk(type, src, dst, 0, 1, n, imatrix);
    } else {
        return 2;
    }
    fwrite(dst, 1, nbytes, stdout);
    return 0;
}
