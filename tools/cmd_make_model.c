/* cmd_make_model.c: attnlim make-model: a deterministic random GPT-2 checkpoint. */
#include "cli.h"
#include "outdir.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(
        f, "usage: attnlim make-model [--preset 124M | --layers L --heads H --embd C --ctx N "
           "--vocab V]\n"
           "                          [--seed S] [--format safetensors|llmc] [--llmc-version 3|5]\n"
           "                          --out PATH [--force] [--json]\n"
           "\n"
           "Writes a deterministic random GPT-2 checkpoint of the real layout (atomically):\n"
           "  safetensors  PATH is a directory receiving model.safetensors (HF names, Conv1D [in, "
           "out],\n"
           "               float32) and config.json\n"
           "  llmc         PATH is an llm.c gpt2_*.bin: version 3 (fp32) or 5 (bf16), [out, in]\n"
           "               matrices, vocabulary padded to a multiple of 128\n"
           "The same seed gives the same weights in both formats. --preset 124M is GPT-2 small:\n"
           "12 layers, 12 heads, 768 channels, 1024 positions, 50257 tokens (defaults: seed 1,\n"
           "safetensors, version 3). A safetensors PATH must be new or empty (the directory\n"
           "appears in one rename); --force replaces an earlier make-model output there\n"
           "(model.safetensors and config.json only), atomically. --json prints {\"out\", "
           "\"format\", \"n_params\", ...}.\n");
}

static int own_file(const char *name) {
    return !strcmp(name, "model.safetensors") || !strcmp(name, "config.json");
}

/* safetensors: written into a temporary directory beside PATH, published in one rename
 * (src/base/outdir.h); llmc: one file, written atomically */
static int publish_model(const al_gpt2_make_opts *o, const char *out, int force, al_error *err) {
    if (o->format == AL_CKPT_LLMC) return al_gpt2_make_model(o, out, err);
    al__outdir *od = calloc(1, sizeof *od);
    if (!od) return al__err(err, AL_E_NOMEM, "out of memory");
    int rc = al__outdir_prepare(od, "make-model", own_file, out, force, err);
    if (!rc) rc = al__outdir_make_tmp(od, err);
    if (!rc) rc = al_gpt2_make_model(o, od->tmp, err);
    if (rc && od->tmp[0]) /* name DIR, not the temporary, in the message */
        al__err_prefix(err, (al_code)rc, "%s", od->dir);
    if (!rc) rc = al__outdir_publish(od, force, err);
    al__outdir_abandon(od);
    free(od);
    return rc;
}

int cmd_make_model(int argc, char **argv) {
    al_gpt2_make_opts o = {0, 0, 0, 0, 0, 1, AL_CKPT_SAFETENSORS, 3};
    const char *out = NULL;
    int json = 0, force = 0;
    al_error err = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--force")) {
            force = 1;
        } else if (i + 1 >= argc) {
            return cli_unknown_option("make-model", a, usage);
        } else if (!strcmp(a, "--preset")) {
            if (strcmp(argv[++i], "124M") != 0)
                return cli_usage_error("make-model", "unknown preset '%s' (known: 124M)", argv[i]);
            o.n_layer = 12, o.n_head = 12, o.n_embd = 768, o.n_ctx = 1024, o.vocab_size = 50257;
        } else if (!strcmp(a, "--format")) {
            const char *f = argv[++i];
            if (!strcmp(f, "safetensors"))
                o.format = AL_CKPT_SAFETENSORS;
            else if (!strcmp(f, "llmc"))
                o.format = AL_CKPT_LLMC;
            else
                return cli_usage_error("make-model", "--format: '%s' is not safetensors or llmc",
                                       f);
        } else if (!strcmp(a, "--out")) {
            out = argv[++i];
        } else {
            static const char *opts[] = {"--layers", "--heads", "--embd",        "--ctx",
                                         "--vocab",  "--seed",  "--llmc-version"};
            int k = -1;
            for (int j = 0; j < 7; j++)
                if (!strcmp(a, opts[j])) k = j;
            if (k < 0) return cli_unknown_option("make-model", a, usage);
            long hi = k == 5 ? 2147483647L : k == 4 ? (1L << 24) : k == 3 ? (1L << 20) : 65536;
            if (cli_parse_int(argv[++i], a, k == 5 ? 0 : 1, hi, &v, &err))
                return cli_usage_error("make-model", "%s", err.msg);
            int *dst[] = {&o.n_layer,    &o.n_head, &o.n_embd,      &o.n_ctx,
                          &o.vocab_size, NULL,      &o.llmc_version};
            if (k == 5)
                o.seed = (uint64_t)v;
            else
                *dst[k] = (int)v;
        }
    }
    if (!out) return cli_usage_error("make-model", "--out PATH is required");
    if (!o.n_layer || !o.n_head || !o.n_embd || !o.n_ctx || !o.vocab_size)
        return cli_usage_error(
            "make-model", "give --preset 124M or all of --layers --heads --embd --ctx --vocab");
    if (publish_model(&o, out, force, &err)) return cli_fail("make-model", &err);
    int64_t C = o.n_embd, L = o.n_layer;
    int64_t n_params =
        (int64_t)o.vocab_size * C + (int64_t)o.n_ctx * C + L * (12 * C * C + 13 * C) + 2 * C;
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "out", out);
        cJSON_AddStringToObject(j, "format", o.format == AL_CKPT_LLMC ? "llmc" : "safetensors");
        if (o.format == AL_CKPT_LLMC) cJSON_AddNumberToObject(j, "llmc_version", o.llmc_version);
        cJSON_AddNumberToObject(j, "n_layer", o.n_layer);
        cJSON_AddNumberToObject(j, "n_head", o.n_head);
        cJSON_AddNumberToObject(j, "n_embd", o.n_embd);
        cJSON_AddNumberToObject(j, "n_ctx", o.n_ctx);
        cJSON_AddNumberToObject(j, "vocab_size", o.vocab_size);
        cJSON_AddNumberToObject(j, "seed", (double)o.seed);
        cJSON_AddNumberToObject(j, "n_params", (double)n_params);
        cli_print_json(j, 0);
    } else {
        printf("wrote %s (%s, %lld parameters)\n", out,
               o.format == AL_CKPT_LLMC ? "llm.c" : "safetensors", (long long)n_params);
    }
    return 0;
}
