/* gemm.h: our own single-threaded GEMMs (gemm.c), float for the forward's matmuls (src/model/
 * ops.c), double for the head metrics' Gram matrices and attention outputs (metrics.c). */
#ifndef AL_GEMM_H
#define AL_GEMM_H

#include <stddef.h>

/* tri of al__dgemm: which parts of A and C matter */
enum {
    AL__GEMM_TRIL_A = 1, /* A [m, K] lower triangular: A[i, k] for k > i + off is 0 and never
                          * read (a row with none is C's init) */
    AL__GEMM_TRIL_C = 2, /* only C[i, j] for j <= i + off is wanted: the micro-tiles wholly
                          * beyond are skipped (C left as it was), the others computed whole */
};

/* C [m, n] (ldc) = (acc ? C : 0) + A [m, K] (lda) @ op(B), op(B) = B [K, n] (ldb) or, transB,
 * B [n, K] (ldb)^T, on one thread. Returns 0, or -1 without touching C when it does not run here
 * (CPU level below AVX-512, no memory, or an empty shape): the caller uses OpenBLAS then.
 * Deterministic: each C element is one FMA chain over k ascending (from 0, or from C when acc)
 * whatever the tiling, so the same bits for any split of C into calls. */
int al__sgemm(float *C, int ldc, const float *A, int lda, const float *B, int ldb, int transB,
              int m, int n, int K, int acc);
/* al__sgemm with C [m, n] = bias [n] (broadcast over the rows; NULL: 0) + A @ op(B): the same
 * bits as writing the bias into C and calling al__sgemm with acc, without that pass over C. */
int al__sgemm_bias(float *C, int ldc, const float *A, int lda, const float *B, int ldb, int transB,
                   int m, int n, int K, const float *bias);
/* The same in double, with tri (0 or AL__GEMM_TRIL_A | AL__GEMM_TRIL_C) and off as above (one
 * diagonal for both: the rows from t0 of a triangular product take off = t0). A
 * triangular A's zeros add nothing to a chain (which never holds -0 unless C did, with acc), so
 * the bits are al__dgemm's on the full A with its upper triangle zeroed. Symmetric: with B = A
 * (transB), C[i, j] and C[j, i] are the same bits (FMA commutes in its factors). */
int al__dgemm(double *C, int ldc, const double *A, int lda, const double *B, int ldb, int transB,
              int m, int n, int K, int acc, int tri, int off);

/* dst [cols] rows of 16 (ld ldd) = the transpose of src [rows <= 16, cols] (ld lds): dst [k * ldd +
 * j] = src [j * lds + k], 0 for rows <= j < 16. AVX-512 code (gemm.c): call only when
 * al__cpu_level() is avx512. Used to pack B^T (gemm.c) and the attention's keys (attention.c). */
void al__transpose16_avx512(float *dst, size_t ldd, const float *src, size_t lds, int rows,
                            int cols);

#endif
