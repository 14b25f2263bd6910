/* gemm_impl.h: the body of gemm.c for one element type: packing, blocking, micro-kernel and
 * driver (see gemm.c for the design). No include guard: gemm.c includes it once per type after
 * defining
 *   GEMM_T       the element type (float, double)
 *   GEMM_V       its zmm type (__m512, __m512d)
 *   GEMM_SFX     the intrinsics' suffix (ps, pd)
 *   GEMM_F(x)    this type's name of the static function x
 *   GEMM_KC, GEMM_MC, GEMM_NC   the blocks (elements), chosen by bytes per type
 *   GEMM_PACK_A  1: A packed into row panels (pack_a; triangular A allowed), 0: A read in place
 *   GEMM_PACK_BT (optional) this type's packing of B [nc, kc]^T (else pack_b's element loop)
 * and undefines them all at its end. MR (rows of a micro-tile) is gemm.c's; a micro-tile has NR
 * = two zmm of columns. */

#define GEMM_VL         ((int)(64 / sizeof(GEMM_T))) /* lanes of a zmm */
#define NR              (2 * GEMM_VL)                /* columns of a micro-tile: two zmm */
#define GEMM_CAT2(a, b) a##b
#define GEMM_CAT(a, b)  GEMM_CAT2(a, b)
#define GEMM_OP(op)     GEMM_CAT(_mm512_##op##_, GEMM_SFX) /* GEMM_OP(load): _mm512_load_ps */
#define GEMM_MIN(a, b)  ((a) < (b) ? (a) : (b))

/* Bp [ceil(nc / NR)][kc][NR] = columns [0, nc) of op(B) over k in [0, kc): B [kc, nc] (ldb)
 * or, transB, B [nc, kc] (ldb) read as its transpose; padded with zeros to whole panels. */
static void GEMM_F(pack_b)(GEMM_T *Bp, const GEMM_T *B, int ldb, int transB, int kc, int nc) {
    if (!transB) { /* row by row of B (one page after the other): k outer */
        for (int k = 0; k < kc; k++)
            for (int j0 = 0; j0 < nc; j0 += NR) {
                int nr = GEMM_MIN(nc - j0, NR);
                GEMM_T *p = Bp + (size_t)(j0 / NR) * kc * NR + (size_t)k * NR; /* [NR] */
                const GEMM_T *b = B + (size_t)k * ldb + j0;                    /* [nr] */
                if (nr == NR) { /* a constant size: vector moves, not a rep movs */
                    memcpy(p, b, sizeof(GEMM_T) * NR);
                    continue;
                }
                memcpy(p, b, (size_t)nr * sizeof *p);
                memset(p + nr, 0, (size_t)(NR - nr) * sizeof *p);
            }
        return;
    }
#ifdef GEMM_PACK_BT
    GEMM_PACK_BT(Bp, B, ldb, kc, nc);
#else
    for (int j0 = 0; j0 < nc; j0 += NR) { /* B [nc, kc]: its rows are the panels' columns */
        int nr = GEMM_MIN(nc - j0, NR);
        GEMM_T *p = Bp + (size_t)(j0 / NR) * kc * NR; /* [kc][NR] */
        const GEMM_T *b = B + (size_t)j0 * ldb;       /* [nr, kc] (ldb) */
        for (int k = 0; k < kc; k++) {                /* k outer: nr streams read, one written */
            for (int j = 0; j < nr; j++) p[(size_t)k * NR + j] = b[(size_t)j * ldb + k];
            for (int j = nr; j < NR; j++) p[(size_t)k * NR + j] = 0;
        }
    }
#endif
}

#if GEMM_PACK_A
/* Ap [ceil(mc / MR)][kc][MR] = A [mc, kc] (lda) in row panels, padded with zero rows; A (i, k)
 * with k > i + diag is taken as 0 and never read (diag >= kc: all of A) */
static void GEMM_F(pack_a)(GEMM_T *Ap, const GEMM_T *A, int lda, int kc, int mc, int diag) {
    for (int i0 = 0; i0 < mc; i0 += MR) {
        int mr = GEMM_MIN(mc - i0, MR), ka[MR];       /* row i's elements k < ka[i] */
        GEMM_T *p = Ap + (size_t)(i0 / MR) * kc * MR; /* [kc][MR] */
        const GEMM_T *a = A + (size_t)i0 * lda;       /* [mr, kc] (lda) */
        for (int i = 0; i < MR; i++)
            ka[i] = i >= mr || i0 + i + diag + 1 < 0 ? 0 : GEMM_MIN(kc, i0 + i + diag + 1);
        for (int k = 0; k < kc; k++) /* k outer: MR streams read, one written */
            for (int i = 0; i < MR; i++)
                p[(size_t)k * MR + i] = k < ka[i] ? a[(size_t)i * lda + k] : 0;
    }
}
#endif

/* A's element (i, k) of a row tile at A: packed (pack_a) [kc][MR], or in place (lda) */
#define GEMM_ARS(lda) (GEMM_PACK_A ? (size_t)1 : (size_t)(lda)) /* between rows */
#define GEMM_ACS      (GEMM_PACK_A ? (size_t)MR : (size_t)1)    /* between k */

/* C [MR, NR] (ldc) = init + A [MR, kc] (rows ars apart, GEMM_ACS between k) @ Bp [kc][NR], each
 * element one FMA chain from init: C (acc), else bias [NR] broadcast over the rows (bias not
 * NULL), else 0. A's rows past mr repeat its last row (their results are not kept: see tile) */
static AL_GEMM_TARGET512 void GEMM_F(kern)(int kc, const GEMM_T *A, size_t ars, int mr,
                                           const GEMM_T *Bp, GEMM_T *C, int ldc, int acc,
                                           const GEMM_T *bias) {
    const GEMM_T *a[MR]; /* packed: A + i (constants: one base register), the padding rows' 0s */
    for (int i = 0; i < MR; i++)
        a[i] = GEMM_PACK_A ? A + i : A + (size_t)(i < mr ? i : mr - 1) * ars;
    GEMM_V c[MR][2];
    const GEMM_V i0 = bias ? GEMM_OP(loadu)(bias) : GEMM_OP(setzero)(),
                 i1 = bias ? GEMM_OP(loadu)(bias + GEMM_VL) : GEMM_OP(setzero)();
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
        c[i][0] = acc ? GEMM_OP(loadu)(C + (size_t)i * ldc) : i0;
        c[i][1] = acc ? GEMM_OP(loadu)(C + (size_t)i * ldc + GEMM_VL) : i1;
    }
    for (int k = 0; k < kc; k++) {
        GEMM_V b0 = GEMM_OP(load)(Bp + (size_t)k * NR),
               b1 = GEMM_OP(load)(Bp + (size_t)k * NR + GEMM_VL);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            GEMM_V ai = GEMM_OP(set1)(a[i][(size_t)k * GEMM_ACS]);
            c[i][0] = GEMM_OP(fmadd)(ai, b0, c[i][0]);
            c[i][1] = GEMM_OP(fmadd)(ai, b1, c[i][1]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
        GEMM_OP(storeu)(C + (size_t)i * ldc, c[i][0]);
        GEMM_OP(storeu)(C + (size_t)i * ldc + GEMM_VL, c[i][1]);
    }
}

/* one micro-tile C [mr <= MR, nr <= NR] (ldc) (init: kern; bias [nr] or NULL): in place when
 * whole, else on a local copy */
static void GEMM_F(tile)(int kc, const GEMM_T *A, size_t ars, const GEMM_T *Bp, GEMM_T *C, int ldc,
                         int mr, int nr, int acc, const GEMM_T *bias) {
    if (mr == MR && nr == NR) {
        GEMM_F(kern)(kc, A, ars, MR, Bp, C, ldc, acc, bias);
        return;
    }
    GEMM_T t[MR * NR], bt[NR] = {0};
    for (int i = 0; i < mr && acc; i++)
        memcpy(t + i * NR, C + (size_t)i * ldc, (size_t)nr * sizeof *t);
    if (bias) memcpy(bt, bias, (size_t)nr * sizeof *bt);
    GEMM_F(kern)(kc, A, ars, mr, Bp, t, NR, acc, bias ? bt : NULL);
    for (int i = 0; i < mr; i++) memcpy(C + (size_t)i * ldc, t + i * NR, (size_t)nr * sizeof *t);
}

/* C [mc, nc] (ldc) = init + A [mc, kc] @ Bp (pack_b), A packed (Ap, pack_a) or in place (lda);
 * init: kern (bias [nc] or NULL). A tile sums only its k <= last row + adiag (the rest of Ap is
 * zeros: adiag >= kc for all of A); a tile whose columns all lie beyond its last row + cdiag
 * (not wanted) is skipped. */
static void GEMM_F(block)(int kc, const GEMM_T *A, int lda, const GEMM_T *Bp, GEMM_T *C, int ldc,
                          int mc, int nc, int acc, const GEMM_T *bias, int adiag, int cdiag) {
    for (int j0 = 0; j0 < nc; j0 += NR) {
        const GEMM_T *bp = Bp + (size_t)(j0 / NR) * kc * NR;
        int nr = GEMM_MIN(nc - j0, NR);
        for (int i0 = 0; i0 < mc; i0 += MR) {
            int mr = GEMM_MIN(mc - i0, MR), kt = i0 + mr + adiag;
            kt = kt < 0 ? 0 : GEMM_MIN(kc, kt);
            if (j0 > i0 + mr - 1 + cdiag || (kt == 0 && acc)) continue;
            const GEMM_T *a = A + (GEMM_PACK_A ? (size_t)(i0 / MR) * kc * MR : (size_t)i0 * lda);
            GEMM_F(tile)
            (kt, a, GEMM_ARS(lda), bp, C + (size_t)i0 * ldc + j0, ldc, mr, nr, acc,
             bias ? bias + j0 : NULL);
        }
    }
}

/* the driver of al__sgemm(_bias) / al__dgemm (gemm.h): C = (acc ? C : bias, or 0) + A @ op(B) */
static int GEMM_F(gemm)(GEMM_T *C, int ldc, const GEMM_T *A, int lda, const GEMM_T *B, int ldb,
                        int transB, int m, int n, int K, int acc, const GEMM_T *bias, int tri,
                        int off) {
    if (al__cpu_level() < AL__CPU_AVX512 || m <= 0 || n <= 0 || K <= 0) return -1;
    int tril_a = (tri & AL__GEMM_TRIL_A) != 0, tril_c = (tri & AL__GEMM_TRIL_C) != 0;
    if (tril_a && !GEMM_PACK_A) return -1; /* a triangular A is packed (its zeros not read) */
    GEMM_T *Bp =
        thread_scratch((size_t)(GEMM_KC * GEMM_NC + GEMM_PACK_A * GEMM_KC * GEMM_MC) * sizeof *Bp);
    if (!Bp) return -1;
    for (int j0 = 0; j0 < n; j0 += GEMM_NC) {
        int nc = GEMM_MIN(n - j0, GEMM_NC);
        for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
            int kc = GEMM_MIN(K - k0, GEMM_KC);
            const GEMM_T *b = transB ? B + (size_t)j0 * ldb + k0 : B + (size_t)k0 * ldb + j0;
            int packed = 0; /* B's block packed on first use: none may need it (triangles) */
            for (int i0 = 0; i0 < m; i0 += GEMM_MC) {
                int mc = GEMM_MIN(m - i0, GEMM_MC);
                /* (a block of A's zeros still starts C's chains when no earlier one did) */
                if ((tril_c && j0 > i0 + mc - 1 + off) ||
                    (tril_a && k0 > i0 + mc - 1 + off && (k0 > 0 || acc)))
                    continue;
                if (!packed++) GEMM_F(pack_b)(Bp, b, ldb, transB, kc, nc);
                int adiag = tril_a ? i0 + off - k0 : kc, cdiag = tril_c ? i0 + off - j0 : nc;
                const GEMM_T *a = A + (size_t)i0 * lda + k0;
#if GEMM_PACK_A
                GEMM_T *Ap = Bp + (size_t)GEMM_KC * GEMM_NC; /* A's packed block, after B's */
                GEMM_F(pack_a)(Ap, a, lda, kc, mc, adiag);
                a = Ap;
#endif
                GEMM_F(block)
                (kc, a, lda, Bp, C + (size_t)i0 * ldc + j0, ldc, mc, nc, acc || k0 > 0,
                 bias ? bias + j0 : NULL, adiag, cdiag);
            }
        }
    }
    return 0;
}

#undef GEMM_VL
#undef NR
#undef GEMM_CAT2
#undef GEMM_CAT
#undef GEMM_OP
#undef GEMM_MIN
#undef GEMM_T
#undef GEMM_V
#undef GEMM_SFX
#undef GEMM_F
#undef GEMM_KC
#undef GEMM_MC
#undef GEMM_NC
#undef GEMM_PACK_A
#undef GEMM_PACK_BT
#undef GEMM_ARS
#undef GEMM_ACS
