/* cmd_info.c: attnlim info: a model's family, config, parameter count, dtypes and file hash. */
#include "cli.h"

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
    /* the model object every manifest carries, with its stored tensors (al_model_describe) */
    char *txt = al_model_describe(m, model, hash, tensors, &err);
    al_model_free(m);
    cJSON *j = txt ? cJSON_Parse(txt) : NULL;
    al_free(txt);
    if (!j) return cli_fail("info", &err);
    if (json)
        cli_print_json(j, 0);
    else {
        print_text(j);
        cJSON_Delete(j);
    }
    return 0;
}
