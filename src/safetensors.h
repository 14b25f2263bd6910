/* safetensors.h: a reader of HF safetensors files (single file, or sharded with
 * model.safetensors.index.json), treating every byte as untrusted (owner: checkpoint module,
 * src/safetensors.c). Tensors are served from a read-only mmap. */
#ifndef AL_SAFETENSORS_H
#define AL_SAFETENSORS_H

#include "internal.h"

typedef enum { AL_ST_F32, AL_ST_F16, AL_ST_BF16, AL_ST_F64, AL_ST_I64, AL_ST_I32, AL_ST_U8, AL_ST_OTHER } al__st_dtype;

typedef struct al__st_tensor {
    char name[256];
    al__st_dtype dtype;
    int ndim;
    int64_t shape[8];
    const unsigned char *data; /* inside the mapping, checked against the file size */
    size_t nbytes;
    const char *file;          /* the file it lives in */
} al__st_tensor;

typedef struct al__safetensors al__safetensors;

/* path: a .safetensors file, a model.safetensors.index.json, or a directory holding either. */
int al__st_open(const char *path, al__safetensors **out, al_error *err);
void al__st_close(al__safetensors *st);
int al__st_count(const al__safetensors *st);
const al__st_tensor *al__st_at(const al__safetensors *st, int i);
const al__st_tensor *al__st_find(const al__safetensors *st, const char *name); /* NULL if absent */
/* Copies tensor name as float32 into dst, checking it exists and has exactly this shape
 * (converting from f16/bf16/f64); the error names the tensor and the file. */
int al__st_load_f32(const al__safetensors *st, const char *name, int ndim, const int64_t *shape, float *dst,
                    al_error *err);

#endif
