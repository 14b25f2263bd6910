/* fuzz_st_index.c: libFuzzer harness for the sharded safetensors index
 * (model.safetensors.index.json with its "weight_map", src/safetensors.c open_index), through
 * the open path of the loaders (al__st_open on the model directory).
 *
 * LLVMFuzzerInitialize builds a private temporary tree once:
 *   <tmp>/outside.safetensors         tensor "secret" (beside the model directory: never served)
 *   <tmp>/m/a.safetensors             tensors "x" F32 [2], "y" F16 [1, 2]
 *   <tmp>/m/b.safetensors             tensors "z" BF16 [3], "e" I32 [0]
 *   <tmp>/m/c.safetensors             tensor  "x" F32 [2] again (a tensor in two shards)
 *   <tmp>/m/bad.safetensors           a truncated header
 *   <tmp>/m/empty.safetensors         0 bytes
 *   <tmp>/m/sub/s.safetensors         tensor "s" (in a subdirectory: not a shard name)
 * Each input is written as <tmp>/m/model.safetensors.index.json and the directory opened.
 * Checks:
 *  - a failure has a message that starts with the file at fault: the index, or a shard path
 *    <tmp>/m/<name> (no '/' in name);
 *  - a success serves only tensors of shards directly in <tmp>/m (never outside.safetensors or
 *    sub/), exactly the tensors of the distinct shards the weight_map names (counted here from
 *    the table above), every weight_map entry found in the shard it names (checked with our
 *    own cJSON walk of the input), and every tensor's bytes readable and convertible. */
#include "safetensors.h"
#include "fuzz_files.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_root[256], g_model[320], g_index[400];

typedef struct shard {
    const char *name;
    int n_tensors; /* -1: not a valid shard */
} shard;
static const shard SHARDS[] = {{"a.safetensors", 2},
                               {"b.safetensors", 2},
                               {"c.safetensors", 1},
                               {"bad.safetensors", -1},
                               {"empty.safetensors", -1}};

static void put(const char *dir, const char *name, const void *p, size_t n) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fuzz_put(path, p, n);
}

/* A safetensors image: the header JSON (padded to 8) then data bytes. */
static void put_st(const char *dir, const char *name, const char *header, const void *data,
                   size_t n) {
    size_t h = strlen(header), padded = (h + 7) / 8 * 8;
    unsigned char *buf = calloc(1, 8 + padded + n);
    if (!buf) abort();
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, header, h);
    memset(buf + 8 + h, ' ', padded - h);
    if (n) memcpy(buf + 8 + padded, data, n);
    put(dir, name, buf, 8 + padded + n);
    free(buf);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(g_root, sizeof g_root, "%s", fuzz_root("st_index"));
    snprintf(g_model, sizeof g_model, "%s/m", g_root);
    snprintf(g_index, sizeof g_index, "%s/model.safetensors.index.json", g_model);
    char sub[400];
    snprintf(sub, sizeof sub, "%s/sub", g_model);
    if (mkdir(g_model, 0700) || mkdir(sub, 0700)) abort();
    const float x[2] = {1.5f, -2.0f};
    const unsigned char y[4] = {0x00, 0x3c, 0x00, 0xc0};             /* F16 1, -2 */
    const unsigned char z[6] = {0x80, 0x3f, 0x00, 0x40, 0x40, 0x40}; /* BF16 1, 2, 3 */
    unsigned char ay[12];
    memcpy(ay, x, 8);
    memcpy(ay + 8, y, 4);
    put_st(g_model, "a.safetensors",
           "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"y\":{\"dtype\":\"F16\",\"shape\":[1,2],\"data_offsets\":[8,12]}}",
           ay, sizeof ay);
    put_st(g_model, "b.safetensors",
           "{\"__metadata__\":{\"format\":\"pt\"},"
           "\"z\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]},"
           "\"e\":{\"dtype\":\"I32\",\"shape\":[0],\"data_offsets\":[6,6]}}",
           z, sizeof z);
    put_st(g_model, "c.safetensors",
           "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", x, sizeof x);
    put(g_model, "bad.safetensors", "\x40\0\0\0\0\0\0\0{\"x\":", 13);
    put(g_model, "empty.safetensors", "", 0);
    put_st(sub, "s.safetensors", "{\"s\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
           x, sizeof x);
    put_st(g_root, "outside.safetensors",
           "{\"secret\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", x, sizeof x);
    return 0;
}

static int shard_tensors(const char *name) {
    for (size_t i = 0; i < sizeof SHARDS / sizeof SHARDS[0]; i++)
        if (strcmp(SHARDS[i].name, name) == 0) return SHARDS[i].n_tensors;
    return -1;
}

/* msg names the index or a shard directly in the model directory, first. */
static int names_a_file(const char *msg) {
    size_t n = strlen(g_index);
    if (strncmp(msg, g_index, n) == 0 && msg[n] == ':') return 1;
    n = strlen(g_model);
    if (strncmp(msg, g_model, n) != 0 || msg[n] != '/') return 0;
    const char *colon = strchr(msg + n + 1, ':');
    const char *slash = strchr(msg + n + 1, '/');
    return colon && colon > msg + n + 1 && (!slash || slash > colon);
}

/* The checks of a successful open against our own reading of the weight_map. */
static void check_open(const al__safetensors *st, const uint8_t *data, size_t size) {
    if (strcmp(al__st_path(st), g_index) != 0) abort();
    cJSON *j = cJSON_ParseWithLength((const char *)data, size);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
    if (!cJSON_IsObject(wm)) abort(); /* it opened: the index had a weight_map */
    const char *seen[16];
    int n_seen = 0, expect = 0;
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e)) abort();
        int k = shard_tensors(e->valuestring);
        if (k < 0) abort(); /* a shard that is not a valid file directly in the model dir */
        int dup = 0;
        for (int i = 0; i < n_seen; i++) dup |= strcmp(seen[i], e->valuestring) == 0;
        if (!dup) {
            if (n_seen == 16) abort();
            seen[n_seen++] = e->valuestring;
            expect += k;
        }
        const al__st_tensor *t = al__st_find(st, e->string);
        if (!t) abort();
        const char *base = strrchr(t->file, '/');
        if (!base || strcmp(base + 1, e->valuestring) != 0) abort();
    }
    if (al__st_count(st) != expect) abort();
    size_t n_model = strlen(g_model);
    for (int i = 0; i < al__st_count(st); i++) {
        const al__st_tensor *t = al__st_at(st, i);
        if (strncmp(t->file, g_model, n_model) != 0 || t->file[n_model] != '/' ||
            strchr(t->file + n_model + 1, '/'))
            abort(); /* a shard outside the model directory */
        if (strcmp(t->name, "secret") == 0 || strcmp(t->name, "s") == 0) abort();
        unsigned sum = 0;
        for (size_t b = 0; b < t->nbytes; b++) sum += t->data[b];
        float f[4];
        al_error err;
        size_t numel = al__st_numel(t);
        if (numel > 4) abort();
        if (t->dtype != AL_ST_I32 && al__st_to_f32(t, f, &err)) abort();
        if (sum == 0xdeadbeef) abort(); /* keeps the reads */
    }
    cJSON_Delete(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    put(g_model, "model.safetensors.index.json", data, size);
    al__safetensors *st = NULL;
    al_error err = {0};
    int rc = al__st_open(g_model, &st, &err);
    if (getenv("AL_FUZZ_VERBOSE")) fprintf(stderr, "%s\n", rc ? err.msg : "opened");
    if (rc == 0) {
        check_open(st, data, size);
        al__st_close(st);
    } else if (!err.msg[0] || !names_a_file(err.msg)) {
        fprintf(stderr, "error message names no file: %s\n", err.msg);
        abort();
    }
    return 0;
}
