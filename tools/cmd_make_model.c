/* cmd_make_model.c: attnlim make-model: a deterministic random GPT-2 checkpoint. */
#include "cli.h"
#include "outdir.h"

#include <stdlib.h>
#include <string.h>

enum {
    O_PRESET = 1,
    O_LAYERS,
    O_HEADS,
    O_EMBD,
    O_CTX,
    O_VOCAB,
    O_SEED,
    O_LLMC_VERSION,
    O_FORMAT,
    O_OUT,
    O_FORCE,
    O_JSON
};
static const cli_opt opts[] = {
    {O_PRESET, "--preset", "124M",
     "GPT-2 small: 12 layers, 12 heads, 768 channels, 1024 positions,\n"
     "50257 tokens"},
    {O_LAYERS, "--layers", "L", "layers"},
    {O_HEADS, "--heads", "H", "heads"},
    {O_EMBD, "--embd", "C", "channels"},
    {O_CTX, "--ctx", "N", "positions"},
    {O_VOCAB, "--vocab", "V", "tokens"},
    {O_SEED, "--seed", "S", "the weights' seed (default 1)"},
    {O_LLMC_VERSION, "--llmc-version", "3|5", "llmc: 3 (fp32, default) or 5 (bf16)"},
    {O_FORMAT, "--format", "F", "safetensors (default) or llmc"},
    {O_OUT, "--out", "PATH", "where to write"},
    {O_FORCE, "--force", NULL, "replace an earlier make-model output at PATH, atomically"},
    {O_JSON, "--json", NULL, "print {\"out\", \"format\", \"n_params\", ...}"},
    CLI_OPT_END,
};

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
           "(model.safetensors and config.json only), atomically.\n\n");
    cli_print_options(f, opts, 22);
}

static int own_file(const char *name, int is_dir) {
    return !is_dir && (!strcmp(name, "model.safetensors") || !strcmp(name, "config.json"));
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
    cli_parser p = {"make-model", argc, argv, opts, usage};
    const char *a;
    for (int id; (id = cli_next(&p, &a)) != CLI_END;) {
        long v;
        if (id == CLI_STOP) {
            return p.status;
        } else if (id == O_JSON) {
            json = 1;
        } else if (id == O_FORCE) {
            force = 1;
        } else if (id == O_PRESET) {
            if (strcmp(a, "124M") != 0)
                return cli_usage_error("make-model", "unknown preset '%s' (known: 124M)", a);
            o.n_layer = 12, o.n_head = 12, o.n_embd = 768, o.n_ctx = 1024, o.vocab_size = 50257;
        } else if (id == O_FORMAT) {
            if (!strcmp(a, "safetensors"))
                o.format = AL_CKPT_SAFETENSORS;
            else if (!strcmp(a, "llmc"))
                o.format = AL_CKPT_LLMC;
            else
                return cli_usage_error("make-model", "--format: '%s' is not safetensors or llmc",
                                       a);
        } else if (id == O_OUT) {
            out = a;
        } else {                   /* the numbers: --layers .. --llmc-version */
            int k = id - O_LAYERS; /* 0..6 */
            long hi = k == 5 ? 2147483647L : k == 4 ? (1L << 24) : k == 3 ? (1L << 20) : 65536;
            if (cli_parse_int(a, p.opt, k == 5 ? 0 : 1, hi, &v, &err))
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
