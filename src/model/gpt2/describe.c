/* describe.c: al_model_describe, the object `attnlim info` prints: the model object of every
 * manifest (al__model_json) with the storage dtypes and, on request, every stored tensor of a
 * safetensors checkpoint (any family's) or an llm.c file (this family's format). */
#include "checkpoint.h"
#include "model.h"
#include "safetensors.h"
#include "textsafe.h"

#include <cjson/cJSON.h>
#include <string.h>

/* Stored tensors of a safetensors or llm.c checkpoint, into j["tensors"] and j["dtypes"]. */
static int list_tensors(const char *path, const char *file, cJSON *j, int want_list,
                        al_error *err) {
    cJSON *dt = cJSON_AddObjectToObject(j, "dtypes");
    cJSON *ts = want_list ? cJSON_AddArrayToObject(j, "tensors") : NULL;
    al__map map;
    al__llmc_hdr h;
    if (al__map_file(file, &map, NULL) == 0) {
        int llmc = map.size >= 4 && al__le32(map.data) == AL_LLMC_MAGIC;
        int rc = llmc ? al__llmc_parse_buffer(map.data, map.size, file, &h, err) : 0;
        al__unmap(&map);
        if (rc) return rc;
        if (llmc) {
            int n = al__gpt2_n_tensors(&h.cfg);
            cJSON_AddNumberToObject(dt, h.version == 3 ? "F32" : "BF16", n);
            cJSON_AddNumberToObject(j, "llmc_version", h.version);
            cJSON_AddNumberToObject(j, "padded_vocab", h.Vp);
            for (int i = 0; ts && i < n; i++) {
                al__gpt2_spec s;
                al__gpt2_spec_at(&h.cfg, i, &s);
                cJSON *t = cJSON_CreateObject();
                cJSON_AddStringToObject(t, "name", s.name);
                cJSON_AddStringToObject(t, "dtype", h.version == 3 ? "F32" : "BF16");
                int64_t shape[2] = {s.is_matrix ? s.shape[1] : s.shape[0],
                                    s.is_matrix ? s.shape[0] : s.shape[1]};
                if (i == 0) shape[0] = h.Vp;
                cJSON *sh = cJSON_AddArrayToObject(t, "shape"); /* as stored: [out, in] */
                for (int d = 0; d < s.ndim; d++)
                    cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)shape[d]));
                cJSON_AddItemToArray(ts, t);
            }
            return 0;
        }
    }
    al__safetensors *st;
    int rc = al__st_open(path, &st, err);
    if (rc) return rc;
    for (int i = 0; i < al__st_count(st); i++) {
        const al__st_tensor *t = al__st_at(st, i);
        cJSON *c = cJSON_GetObjectItemCaseSensitive(dt, t->dtype_name);
        if (c)
            cJSON_SetNumberValue(c, c->valuedouble + 1);
        else
            cJSON_AddNumberToObject(dt, t->dtype_name, 1);
        if (!ts) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", t->name);
        cJSON_AddStringToObject(o, "dtype", t->dtype_name);
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        for (int d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddItemToArray(ts, o);
    }
    al__st_close(st);
    return 0;
}

char *al_model_describe(al_model *m, const char *given, int hash, int tensors, al_error *err) {
    cJSON *j = al__model_json(m, given, hash, err);
    if (!j) return NULL;
    const al_model_info *in = al_model_get_info(m);
    int rc = 0;
    if (cJSON_GetObjectItemCaseSensitive(j, "dump"))
        ; /* arrays, not tensors: the files above */
    else if (!strcmp(in->family, "gpt2"))
        rc = list_tensors(in->path, in->path, j, tensors, err);
    else if (strcmp(in->family, "llama") && list_tensors(in->path, in->path, j, tensors, NULL)) {
        /* other safetensors families: the listing is best effort */
        cJSON_DeleteItemFromObject(j, "dtypes");
        cJSON_DeleteItemFromObject(j, "tensors");
    }
    char *s = rc ? NULL : al__json_print(j, 0);
    if (!rc && !s) al__err(err, AL_E_NOMEM, "out of memory");
    cJSON_Delete(j);
    return s;
}
