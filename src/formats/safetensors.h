/* safetensors.h: a reader of HF safetensors files (single file, or sharded with
 * model.safetensors.index.json), treating every byte as untrusted (owner: checkpoint module,
 * src/safetensors.c). Tensors are served from a read-only mmap. */
#ifndef AL_SAFETENSORS_H
#define AL_SAFETENSORS_H

#include "internal.h"

typedef enum {
    AL_ST_F32,
    AL_ST_F16,
    AL_ST_BF16,
    AL_ST_F64,
    AL_ST_I64,
    AL_ST_I32,
    AL_ST_U8,
    AL_ST_OTHER
} al__st_dtype;

typedef struct al__st_tensor {
    char name[256];
    al__st_dtype dtype;
    int ndim;
    int64_t shape[8];
    const unsigned char *data; /* inside the mapping, checked against the file size */
    size_t nbytes;
    const char *file;    /* the file it lives in */
    char dtype_name[12]; /* as written in the header: "F32", "BF16", "I8", ... */
} al__st_tensor;

typedef struct al__safetensors al__safetensors;

/* path: a .safetensors file, a model.safetensors.index.json, or a directory holding either. */
int al__st_open(const char *path, al__safetensors **out, al_error *err);
void al__st_close(al__safetensors *st);
int al__st_count(const al__safetensors *st);
/* The file opened: the .safetensors, or the index .json of a sharded checkpoint. */
const char *al__st_path(const al__safetensors *st);
const al__st_tensor *al__st_at(const al__safetensors *st, int i);
const al__st_tensor *al__st_find(const al__safetensors *st, const char *name); /* NULL if absent */
/* Copies tensor name as float32 into dst, checking it exists and has exactly this shape
 * (converting from f16/bf16/f64); the error names the tensor and the file. */
int al__st_load_f32(const al__safetensors *st, const char *name, int ndim, const int64_t *shape,
                    float *dst, al_error *err);
/* Its checks alone (present, this shape), for checking every tensor before allocating. */
int al__st_check_f32(const al__safetensors *st, const char *name, int ndim, const int64_t *shape,
                     al_error *err);

/* Parses one safetensors image buf[len] (8-byte LE header length, JSON header, data) without
 * touching any file: the entry point of the fuzz harness. name is used in messages and stored
 * in each tensor's file field (it must outlive the tensors). Tensors point into buf and come
 * sorted by name; *out is malloc'ed [*n]. Rules (every violation is an AL_E_FORMAT error
 * naming the file and the fault):
 *  - header length <= 100 MB and <= file size - 8; the header is one JSON object, optionally
 *    followed by whitespace padding; "__metadata__" must map strings to strings;
 *  - each tensor: known dtype, rank <= 8, dims >= 0, numel * dtype size without overflow,
 *    data_offsets [begin, end] relative to the data start with begin <= end <= data size and
 *    end - begin == numel * dtype size; names unique and < 256 bytes;
 *  - tensors may come in any order in the header and gaps between them are allowed, but two
 *    non-empty tensors may not share a byte (overlap = a lying file, rejected). */
int al__st_parse_buffer(const unsigned char *buf, size_t len, const char *name, al__st_tensor **out,
                        int *n, al_error *err);
/* An al__safetensors over a caller-owned buffer (no file; buf must outlive it): the fuzz
 * entry point of code that takes an opened checkpoint. name stands for the file path. */
int al__st_open_buffer(const unsigned char *buf, size_t len, const char *name,
                       al__safetensors **out, al_error *err);
/* Bytes per element of a dtype name ("F32" -> 4), 0 if unknown. */
size_t al__st_dtype_size(const char *dtype_name);
/* numel of a tensor (fits: checked at parse time). */
size_t al__st_numel(const al__st_tensor *t);
/* Converts a float tensor (F32/F16/BF16/F64) to float32 into dst [numel]; unaligned data is
 * fine. AL_E_UNSUPPORTED for integer dtypes (the error names the tensor and the file). */
int al__st_to_f32(const al__st_tensor *t, float *dst, al_error *err);
/* Half-precision helpers (also used by the llm.c reader and writer). */
float al__f16_to_f32(uint16_t h);
float al__bf16_to_f32(uint16_t h);
uint16_t al__f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */

#endif
