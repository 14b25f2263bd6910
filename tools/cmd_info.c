/* cmd_info.c: attnlim info: a model's family, config, parameter count, dtypes and file hash. */
#include "checkpoint.h"
#include "cli.h"
#include "model.h"
#include "safetensors.h"

#include <stdlib.h>
#include <string.h>

enum { O_MODEL = 1, O_TENSORS, O_NO_HASH, O_JSON };
static const cli_opt opts[] = {
    {O_MODEL, "--model", "PATH|NAME", "a checkpoint, a known name or an attention dump directory"},
    {O_TENSORS, "--tensors", NULL,
     "list every stored tensor (name, dtype, shape) of a safetensors or llm.c file"},
    {O_NO_HASH, "--no-hash", NULL, "list the files without hashing them"},
    {O_JSON, "--json", NULL, "one JSON object"},
    CLI_OPT_END,
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: attnlim info --model PATH|NAME [--tensors] [--no-hash] [--json]\n"
            "\n"
            "Opens a model or an attention dump (docs/dumps.md; every size, offset, shape and\n"
            "dtype checked) and prints its family, config, parameter count, storage dtypes, the\n"
            "files that define it (config.json, the shard index and every shard; the one .bin /\n"
            ".gguf; a dump's manifest.json and arrays) with their SHA-256s, and the\n"
            "model identity 'sha256': the SHA-256 of the lines '<sha256>  <name>' of those files\n"
            "sorted by name, i.e. `sha256sum FILES | LC_ALL=C sort -k 2 | sha256sum`. NaN/Inf\n"
            "weights are a warning (exit 0).\n");
    cli_print_options(f, opts, 13);
}

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

/* The "dump" object of an attention dump, as a few lines. */
static void print_dump(const cJSON *d) {
    const cJSON *ar = cJSON_GetObjectItem(d, "arrays"), *ly = cJSON_GetObjectItem(d, "layers"),
                *hd = cJSON_GetObjectItem(d, "heads");
    printf("%-12s %s (%s); T = %d; token ids %s\n", "dump",
           cJSON_GetObjectItem(d, "path")->valuestring,
           cJSON_GetObjectItem(d, "manifest_schema")->valuestring,
           cJSON_GetObjectItem(d, "T")->valueint,
           cJSON_IsTrue(cJSON_GetObjectItem(d, "token_ids")) ? "recorded"
                                                             : "not recorded (any tokens)");
    printf("%-12s", "  arrays");
    for (const cJSON *a = ar->child; a; a = a->next) printf(" %s", a->valuestring);
    printf("\n%-12s %d stored, %d stored heads\n", "  layers", cJSON_GetArraySize(ly),
           cJSON_GetArraySize(hd));
}

static void print_text(const cJSON *j) {
    for (const cJSON *e = j->child; e; e = e->next) {
        if (cJSON_IsArray(e)) continue;
        if (!strcmp(e->string, "dump")) {
            print_dump(e);
            continue;
        }
        if (!strcmp(e->string, "architecture")) { /* one line per fact, as JSON values */
            for (const cJSON *d = e->child; d; d = d->next) {
                char *v = cJSON_PrintUnformatted(d);
                printf("  %-22s %s\n", d->string, v ? v : "?");
                free(v);
            }
            continue;
        }
        if (cJSON_IsObject(e)) {
            printf("%-12s", e->string);
            for (const cJSON *d = e->child; d; d = d->next)
                printf(" %s x%d", d->string, (int)d->valuedouble);
            printf("\n");
        } else if (cJSON_IsString(e)) /* the hash over the model's files is its identity */
            printf("%-12s %s\n",
                   !strcmp(e->string, "sha256")      ? "identity"
                   : !strcmp(e->string, "sha256_of") ? "identity_of"
                                                     : e->string,
                   e->valuestring);
        else if (cJSON_IsNumber(e))
            printf("%-12s %.0f\n", e->string, e->valuedouble);
        else if (cJSON_IsBool(e))
            printf("%-12s %s\n", e->string, cJSON_IsTrue(e) ? "true" : "false");
    }
    const cJSON *fs = cJSON_GetObjectItemCaseSensitive(j, "files");
    for (const cJSON *f = fs ? fs->child : NULL; f; f = f->next) {
        const cJSON *sha = cJSON_GetObjectItem(f, "sha256");
        printf("  %-9s %-40s %12.0f bytes  %s\n", cJSON_GetObjectItem(f, "role")->valuestring,
               cJSON_GetObjectItem(f, "name")->valuestring,
               cJSON_GetObjectItem(f, "bytes")->valuedouble, sha ? sha->valuestring : "");
    }
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(j, "tensors");
    for (const cJSON *t = ts ? ts->child : NULL; t; t = t->next) {
        printf("  %-40s %-5s [", cJSON_GetObjectItem(t, "name")->valuestring,
               cJSON_GetObjectItem(t, "dtype")->valuestring);
        const cJSON *sh = cJSON_GetObjectItem(t, "shape");
        for (const cJSON *d = sh->child; d; d = d->next)
            printf("%s%.0f", d == sh->child ? "" : ", ", d->valuedouble);
        printf("]\n");
    }
}

int cmd_info(int argc, char **argv) {
    const char *model = NULL;
    int json = 0, tensors = 0, hash = 1;
    cli_parser p = {"info", argc, argv, opts, usage};
    const char *v;
    for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
        if (id == CLI_STOP) return p.status;
        if (id == O_JSON) json = 1;
        if (id == O_TENSORS) tensors = 1;
        if (id == O_NO_HASH) hash = 0;
        if (id == O_MODEL) model = v;
    }
    if (!model) return cli_usage_error("info", "--model PATH is required");
    al_error err = {0};
    al_model *m;
    if (al_model_open(model, &m, &err)) return cli_fail("info", &err);
    /* the model object every manifest carries (files, identity, shape, load warnings, dump) */
    cJSON *j = al__model_json(m, model, hash, &err);
    if (!j) {
        al_model_free(m);
        return cli_fail("info", &err);
    }
    const al_model_info *in = al_model_get_info(m);
    int dump = cJSON_GetObjectItemCaseSensitive(j, "dump") != NULL;
    int rc = 0;
    if (dump)
        ; /* arrays, not tensors: the files above */
    else if (!strcmp(in->family, "gpt2"))
        rc = list_tensors(in->path, in->path, j, tensors, &err);
    else if (strcmp(in->family, "llama") &&
             list_tensors(in->path, in->path, j, tensors,
                          &err)) { /* other safetensors families: the listing is best effort */
        cJSON_DeleteItemFromObject(j, "dtypes");
        cJSON_DeleteItemFromObject(j, "tensors");
    }
    al_model_free(m);
    if (rc) {
        cJSON_Delete(j);
        return cli_fail("info", &err);
    }
    if (json)
        cli_print_json(j, 0);
    else {
        print_text(j);
        cJSON_Delete(j);
    }
    return 0;
}
