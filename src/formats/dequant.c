/* dequant.c: GGML tensor types to float32, written from the block layouts of the format:
 *
 *   Q4_0 [32 elems, 18 B]: f16 d, u8 qs[16];            x[j] = d*((qs[j]&15)-8), x[j+16] =
 * d*((qs[j]>>4)-8) Q4_1 [32, 20]: f16 d, f16 m, u8 qs[16];             x[j] = d*(qs[j]&15)+m,
 * x[j+16] = d*(qs[j]>>4)+m Q5_0 [32, 22]: f16 d, u32 qh, u8 qs[16];            5th bit of element i
 * is bit i of qh; q-16 Q5_1 [32, 24]: f16 d, f16 m, u32 qh, u8 qs[16];     as Q5_0 without the -16,
 * then *d+m Q8_0 [32, 34]: f16 d, i8 qs[32];                    x[j] = d*qs[j] Q4_K [256, 144]: f16
 * d, f16 dmin, u8 scales[12], u8 qs[128]; 8 sub-blocks of 32 with 6-bit scale and min: x = d*sc*q -
 * dmin*m Q5_K [256, 176]: as Q4_K plus u8 qh[32] (a 5th bit per element) before qs Q6_K [256, 210]:
 * u8 ql[128], u8 qh[64], i8 scales[16], f16 d; 16 sub-blocks of 16; x = d*scale*(q-32) with q 6
 * bits (4 low from ql, 2 high from qh) F32, F16, BF16: element-wise.
 */
#include "gguf.h"

#include <string.h>

typedef struct type_info {
    uint32_t type;
    const char *name;
    size_t block_elems, block_bytes;
    int dequant; /* supported by al__ggml_dequant */
} type_info;

static const type_info TYPES[] = {
    {0, "F32", 1, 4, 1},         {1, "F16", 1, 2, 1},         {2, "Q4_0", 32, 18, 1},
    {3, "Q4_1", 32, 20, 1},      {6, "Q5_0", 32, 22, 1},      {7, "Q5_1", 32, 24, 1},
    {8, "Q8_0", 32, 34, 1},      {9, "Q8_1", 32, 36, 0},      {10, "Q2_K", 256, 84, 0},
    {11, "Q3_K", 256, 110, 0},   {12, "Q4_K", 256, 144, 1},   {13, "Q5_K", 256, 176, 1},
    {14, "Q6_K", 256, 210, 1},   {15, "Q8_K", 256, 292, 0},   {16, "IQ2_XXS", 256, 66, 0},
    {17, "IQ2_XS", 256, 74, 0},  {18, "IQ3_XXS", 256, 98, 0}, {19, "IQ1_S", 256, 50, 0},
    {20, "IQ4_NL", 32, 18, 0},   {21, "IQ3_S", 256, 110, 0},  {22, "IQ2_S", 256, 82, 0},
    {23, "IQ4_XS", 256, 136, 0}, {24, "I8", 1, 1, 0},         {25, "I16", 1, 2, 0},
    {26, "I32", 1, 4, 0},        {27, "I64", 1, 8, 0},        {28, "F64", 1, 8, 0},
    {29, "IQ1_M", 256, 56, 0},   {30, "BF16", 1, 2, 1},       {34, "TQ1_0", 256, 54, 0},
    {35, "TQ2_0", 256, 66, 0},
};

static const type_info *find_type(uint32_t t) {
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (TYPES[i].type == t) return &TYPES[i];
    return NULL;
}

const char *al__ggml_type_name(uint32_t type) {
    const type_info *ti = find_type(type);
    return ti ? ti->name : "unknown";
}

int al__ggml_type_size(uint32_t type, size_t *block_elems, size_t *block_bytes) {
    const type_info *ti = find_type(type);
    if (!ti) return 0;
    *block_elems = ti->block_elems;
    *block_bytes = ti->block_bytes;
    return 1;
}

int al__ggml_can_dequant(uint32_t type) {
    const type_info *ti = find_type(type);
    return ti && ti->dequant;
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 31, man = h & 1023u, bits;
    if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13); /* inf / nan */
    } else if (exp == 0) {
        if (man == 0)
            bits = sign;
        else { /* subnormal: man * 2^-24 */
            float f = (float)man * (1.0f / 16777216.0f);
            return sign ? -f : f;
        }
    } else {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static float f16_at(const unsigned char *p) {
    return half_to_float(al__le16(p));
}

static void dq_q4_0(const unsigned char *b, float *y) {
    float d = f16_at(b);
    const unsigned char *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((qs[j] & 15) - 8);
        y[j + 16] = d * (float)((qs[j] >> 4) - 8);
    }
}

static void dq_q4_1(const unsigned char *b, float *y) {
    float d = f16_at(b), m = f16_at(b + 2);
    const unsigned char *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(qs[j] & 15) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

static void dq_q5_0(const unsigned char *b, float *y) {
    float d = f16_at(b);
    uint32_t qh = al__le32(b + 2);
    const unsigned char *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 15) | (int)(((qh >> j) & 1u) << 4);
        int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
        y[j] = d * (float)(lo - 16);
        y[j + 16] = d * (float)(hi - 16);
    }
}

static void dq_q5_1(const unsigned char *b, float *y) {
    float d = f16_at(b), m = f16_at(b + 2);
    uint32_t qh = al__le32(b + 4);
    const unsigned char *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 15) | (int)(((qh >> j) & 1u) << 4);
        int hi = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
        y[j] = d * (float)lo + m;
        y[j + 16] = d * (float)hi + m;
    }
}

static void dq_q8_0(const unsigned char *b, float *y) {
    float d = f16_at(b);
    for (int j = 0; j < 32; j++) y[j] = d * (float)(int8_t)b[2 + j];
}

/* The 6-bit scale and min of sub-block j (0..7) packed in 12 bytes (Q4_K, Q5_K). */
static void scale_min_k4(int j, const unsigned char *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void dq_q4_k(const unsigned char *b, float *y) {
    float d = f16_at(b), dmin = f16_at(b + 2);
    const unsigned char *scales = b + 4, *q = b + 16;
    for (int s = 0; s < 8; s += 2) { /* 64 elements: low nibbles then high nibbles of 32 bytes */
        int sc0, m0, sc1, m1;
        scale_min_k4(s, scales, &sc0, &m0);
        scale_min_k4(s + 1, scales, &sc1, &m1);
        float d0 = d * (float)sc0, mm0 = dmin * (float)m0, d1 = d * (float)sc1,
              mm1 = dmin * (float)m1;
        for (int l = 0; l < 32; l++) y[l] = d0 * (float)(q[l] & 15) - mm0;
        for (int l = 0; l < 32; l++) y[32 + l] = d1 * (float)(q[l] >> 4) - mm1;
        y += 64;
        q += 32;
    }
}

static void dq_q5_k(const unsigned char *b, float *y) {
    float d = f16_at(b), dmin = f16_at(b + 2);
    const unsigned char *scales = b + 4, *qh = b + 16, *q = b + 48;
    unsigned u0 = 1, u1 = 2;
    for (int s = 0; s < 8; s += 2) {
        int sc0, m0, sc1, m1;
        scale_min_k4(s, scales, &sc0, &m0);
        scale_min_k4(s + 1, scales, &sc1, &m1);
        float d0 = d * (float)sc0, mm0 = dmin * (float)m0, d1 = d * (float)sc1,
              mm1 = dmin * (float)m1;
        for (int l = 0; l < 32; l++)
            y[l] = d0 * (float)((q[l] & 15) + ((qh[l] & u0) ? 16 : 0)) - mm0;
        for (int l = 0; l < 32; l++)
            y[32 + l] = d1 * (float)((q[l] >> 4) + ((qh[l] & u1) ? 16 : 0)) - mm1;
        y += 64;
        q += 32;
        u0 <<= 2;
        u1 <<= 2;
    }
}

static void dq_q6_k(const unsigned char *b, float *y) {
    const unsigned char *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = f16_at(b + 208);
    for (int half = 0; half < 2; half++) { /* 128 elements each */
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

int al__ggml_dequant(uint32_t type, const void *src, size_t src_bytes, int64_t n, float *dst,
                     al_error *err) {
    const type_info *ti = find_type(type);
    if (!ti || !ti->dequant)
        return al__err(err, AL_E_UNSUPPORTED,
                       "tensor type %s (%u) cannot be dequantised (supported: F32, F16, "
                       "BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)",
                       ti ? ti->name : "unknown", type);
    if (n < 0 || (size_t)n % ti->block_elems != 0)
        return al__err(err, AL_E_INVALID, "%lld elements are not whole %s blocks of %zu",
                       (long long)n, ti->name, ti->block_elems);
    size_t nb = (size_t)n / ti->block_elems, need;
    if (!al__mul_ok(nb, ti->block_bytes, &need) || need != src_bytes)
        return al__err(err, AL_E_INVALID, "%lld %s elements need %zu bytes, got %zu", (long long)n,
                       ti->name, nb * ti->block_bytes, src_bytes);
    const unsigned char *p = src;
    void (*block)(const unsigned char *, float *) = NULL;
    switch (type) {
    case AL_GGML_F32:
        for (size_t i = 0; i < nb; i++) {
            uint32_t bits = al__le32(p + 4 * i);
            memcpy(&dst[i], &bits, 4);
        }
        return 0;
    case AL_GGML_F16:
        for (size_t i = 0; i < nb; i++) dst[i] = f16_at(p + 2 * i);
        return 0;
    case AL_GGML_BF16:
        for (size_t i = 0; i < nb; i++) {
            uint32_t bits = (uint32_t)al__le16(p + 2 * i) << 16;
            memcpy(&dst[i], &bits, 4);
        }
        return 0;
    case AL_GGML_Q4_0:
        block = dq_q4_0;
        break;
    case AL_GGML_Q4_1:
        block = dq_q4_1;
        break;
    case AL_GGML_Q5_0:
        block = dq_q5_0;
        break;
    case AL_GGML_Q5_1:
        block = dq_q5_1;
        break;
    case AL_GGML_Q8_0:
        block = dq_q8_0;
        break;
    case AL_GGML_Q4_K:
        block = dq_q4_k;
        break;
    case AL_GGML_Q5_K:
        block = dq_q5_k;
        break;
    case AL_GGML_Q6_K:
        block = dq_q6_k;
        break;
    default:
        return al__err(err, AL_E_UNSUPPORTED, "tensor type %s cannot be dequantised", ti->name);
    }
#pragma omp parallel for schedule(static) if (nb > 4096)
    for (size_t i = 0; i < nb; i++) block(p + i * ti->block_bytes, dst + i * ti->block_elems);
    return 0;
}
