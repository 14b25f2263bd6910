/* gguf.h: a reader of GGUF files (versions 2 and 3) treating every byte as untrusted, and
 * the dequantisation of GGML tensor types to float32 (owner: llama module, src/gguf.c and
 * src/dequant.c).
 *
 * GGUF layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv
 * key/value pairs (string key, u32 value type, value), then n_tensors tensor infos (string
 * name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset), padding to the alignment
 * (general.alignment, default 32), then the tensor data; each tensor's offset is relative to
 * the start of the data section and aligned. A string is u64 length + bytes (no NUL). */
#ifndef AL_GGUF_H
#define AL_GGUF_H

#include "internal.h"

/* Metadata value types (the numbering of the format). */
typedef enum {
    AL_GGUF_U8 = 0,
    AL_GGUF_I8 = 1,
    AL_GGUF_U16 = 2,
    AL_GGUF_I16 = 3,
    AL_GGUF_U32 = 4,
    AL_GGUF_I32 = 5,
    AL_GGUF_F32 = 6,
    AL_GGUF_BOOL = 7,
    AL_GGUF_STRING = 8,
    AL_GGUF_ARRAY = 9,
    AL_GGUF_U64 = 10,
    AL_GGUF_I64 = 11,
    AL_GGUF_F64 = 12,
} al__gguf_vtype;

/* GGML tensor types (the numbering of the format) that the reader knows the block size of. */
typedef enum {
    AL_GGML_F32 = 0,
    AL_GGML_F16 = 1,
    AL_GGML_Q4_0 = 2,
    AL_GGML_Q4_1 = 3,
    AL_GGML_Q5_0 = 6,
    AL_GGML_Q5_1 = 7,
    AL_GGML_Q8_0 = 8,
    AL_GGML_Q8_1 = 9,
    AL_GGML_Q2_K = 10,
    AL_GGML_Q3_K = 11,
    AL_GGML_Q4_K = 12,
    AL_GGML_Q5_K = 13,
    AL_GGML_Q6_K = 14,
    AL_GGML_Q8_K = 15,
    AL_GGML_BF16 = 30,
} al__ggml_type;

/* Limits on untrusted files. */
#define AL_GGUF_MAX_TENSORS (1 << 20)
#define AL_GGUF_MAX_KV      (1 << 20)
#define AL_GGUF_MAX_KEY     65535        /* bytes of a key or a tensor name */
#define AL_GGUF_MAX_STRING  (256u << 20) /* bytes of one string value */
#define AL_GGUF_MAX_DIMS    4

/* One metadata entry. Scalars are decoded; strings and arrays point into the file. */
typedef struct al__gguf_kv {
    char *key; /* NUL-terminated copy */
    al__gguf_vtype type;
    union {
        uint64_t u; /* U8..U64, BOOL */
        int64_t i;  /* I8..I64 */
        double f;   /* F32, F64 */
    } v;
    const char *str; /* STRING: bytes inside the file (not NUL-terminated) */
    size_t str_len;
    al__gguf_vtype arr_type;       /* ARRAY: element type (never ARRAY) */
    uint64_t arr_n;                /* ARRAY: element count */
    const unsigned char *arr_data; /* ARRAY: first element inside the file */
} al__gguf_kv;

typedef struct al__gguf_tensor {
    char *name;                   /* NUL-terminated copy */
    uint32_t type;                /* al__ggml_type (a known one) */
    int n_dims;                   /* 1..4 */
    int64_t ne[AL_GGUF_MAX_DIMS]; /* ne[0] fastest-varying (a row); unused dims are 1 */
    int64_t n_elem;               /* product of ne */
    uint64_t offset;              /* relative to the data section */
    const unsigned char *data;    /* inside the file, nbytes of it checked */
    size_t nbytes;
} al__gguf_tensor;

typedef struct al__gguf {
    char name[1024]; /* the file, for messages */
    al__map map;     /* when opened from a file (else data borrowed) */
    const unsigned char *data;
    size_t size;
    uint32_t version;
    int64_t n_kv;
    al__gguf_kv *kv; /* [n_kv] */
    int64_t n_tensors;
    al__gguf_tensor *tensors; /* [n_tensors] */
    size_t alignment;
    size_t data_offset; /* start of the data section */
} al__gguf;

/* Opens and validates a file (mmap). */
int al__gguf_open(const char *path, al__gguf **out, al_error *err);
/* Validates a buffer in memory (borrowed: it must outlive the result); name is used in
 * messages. The fuzz harness's entry point. Beyond the layout, two tensors may not share a
 * data byte (a lying file: its bytes would stand for any number of tensors). */
int al__gguf_parse(const void *buf, size_t len, const char *name, al__gguf **out, al_error *err);
void al__gguf_close(al__gguf *g);

/* Metadata lookups (NULL / error when absent or of another type). */
const al__gguf_kv *al__gguf_find(const al__gguf *g, const char *key);
/* An integer of any integer type (or bool), checked to fit [lo, hi]. */
int al__gguf_get_int(const al__gguf *g, const char *key, int64_t lo, int64_t hi, int64_t *out,
                     al_error *err);
int al__gguf_get_float(const al__gguf *g, const char *key, double *out,
                       al_error *err); /* F32/F64 */
/* A string copied into out (NUL-terminated); too long for out is an error. */
int al__gguf_get_str(const al__gguf *g, const char *key, char *out, size_t cap, al_error *err);
/* An array of strings: *strs[n] NUL-terminated copies in one allocation (free(*strs)). */
int al__gguf_get_str_array(const al__gguf *g, const char *key, char ***strs, int64_t *n,
                           al_error *err);
/* An array of integers as int32 (*vals malloc'ed). */
int al__gguf_get_i32_array(const al__gguf *g, const char *key, int32_t **vals, int64_t *n,
                           al_error *err);
/* An array of F32 or F64 as float (*vals malloc'ed). */
int al__gguf_get_f32_array(const al__gguf *g, const char *key, float **vals, int64_t *n,
                           al_error *err);

const al__gguf_tensor *al__gguf_tensor_find(const al__gguf *g, const char *name);

/* Types. name: "Q4_1", ... ("type N" unknowns are rendered by the caller). */
const char *al__ggml_type_name(uint32_t type);
/* Block geometry of a known type; 0 if unknown. */
int al__ggml_type_size(uint32_t type, size_t *block_elems, size_t *block_bytes);
/* 1 if dequantise below supports the type. */
int al__ggml_can_dequant(uint32_t type);
/* Dequantises n elements (a multiple of the block) of src (exactly the bytes of those
 * blocks) into dst[n]. */
int al__ggml_dequant(uint32_t type, const void *src, size_t src_bytes, int64_t n, float *dst,
                     al_error *err);
/* A tensor of exactly the given dims (ne order, fastest first) into dst[n_elem] as float32;
 * errors name the tensor, the file and the fault (absent, wrong shape, unsupported type). */
int al__gguf_load_f32(const al__gguf *g, const char *name, int n_dims, const int64_t *ne,
                      float *dst, al_error *err);
/* Its checks alone (present, these dims, a supported type): loaders check every tensor before
 * they allocate the weights (a config claiming more than the file holds is a tensor mismatch,
 * never an attempt at terabytes). */
int al__gguf_check_f32(const al__gguf *g, const char *name, int n_dims, const int64_t *ne,
                       al_error *err);

#endif
