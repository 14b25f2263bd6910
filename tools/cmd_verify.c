/* cmd_verify.c: attnlim verify: a GPT-2 checkpoint's tensors against the pinned SHA-256 table. */
#include "cli.h"

#include <string.h>

enum { O_MODEL = 1, O_TABLE, O_JSON, O_QUIET };
static const cli_opt opts[] = {
    {O_MODEL, "--model", "PATH", "the checkpoint"},
    {O_TABLE, "--table", "TSV",
     "name<TAB>bytes<TAB>sha256 lines (default: the pinned GPT-2 124M table,\n"
     "data/gpt2_124M_tensor_sha256.tsv, found in share/attnlim or the source tree)"},
    {O_JSON, "--json", NULL, "one JSON object: totals and every tensor"},
    {O_QUIET, "--quiet", NULL, "totals only (text mode)"},
    CLI_OPT_END,
};

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: attnlim verify --model PATH [--table TSV] [--json] [--quiet]\n"
        "\n"
        "Hashes every tensor of a GPT-2 checkpoint (a .safetensors file, an HF directory or\n"
        "model.safetensors.index.json, or an llm.c .bin; no config.json needed) as HF float32\n"
        "little-endian bytes (Conv1D [in, out]; llm.c matrices are transposed back, bf16 is\n"
        "converted) and compares each with the table: matched, mismatched, missing (a parameter\n"
        "absent), optional (an absent HF buffer or the tied lm_head), unexpected (not in the "
        "table).\n");
    cli_print_options(f, opts, 15);
    fprintf(f, "Exit status: 0 when every tensor present matches (the report says whether the "
               "model is\n"
               "complete), 1 on any mismatched or unexpected tensor, on no tensor at all, or an "
               "error.\n");
}

static const char *status_name(al_verify_status s) {
    static const char *names[] = {"matched", "MISMATCHED", "missing", "UNEXPECTED", "optional"};
    return (unsigned)s < 5 ? names[s] : "?";
}

int cmd_verify(int argc, char **argv) {
    const char *model = NULL, *table = NULL;
    int json = 0, quiet = 0;
    cli_parser p = {"verify", argc, argv, opts, usage};
    const char *v;
    for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
        if (id == CLI_STOP) return p.status;
        if (id == O_JSON) json = 1;
        if (id == O_QUIET) quiet = 1;
        if (id == O_MODEL) model = v;
        if (id == O_TABLE) table = v;
    }
    if (!model) return cli_usage_error("verify", "--model PATH is required");
    al_error err = {0};
    al_verify_report r;
    if (al_gpt2_verify(model, table, &r, &err)) return cli_fail("verify", &err);
    int present = r.matched + r.mismatched + r.unexpected;
    int ok = r.mismatched == 0 && r.unexpected == 0 && present > 0;
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "model", model);
        cJSON_AddStringToObject(j, "table", r.table);
        cJSON_AddStringToObject(j, "format", r.format);
        cJSON_AddNumberToObject(j, "matched", r.matched);
        cJSON_AddNumberToObject(j, "mismatched", r.mismatched);
        cJSON_AddNumberToObject(j, "missing", r.missing);
        cJSON_AddNumberToObject(j, "unexpected", r.unexpected);
        cJSON_AddNumberToObject(j, "optional_absent", r.optional_absent);
        cJSON_AddBoolToObject(j, "complete", r.complete);
        cJSON_AddBoolToObject(j, "ok", ok);
        cJSON *ts = cJSON_AddArrayToObject(j, "tensors");
        for (int i = 0; i < r.n; i++) {
            const al_verify_entry *e = &r.entries[i];
            cJSON *t = cJSON_CreateObject();
            cJSON_AddStringToObject(t, "name", e->name);
            cJSON_AddStringToObject(t, "status",
                                    e->status == AL_VERIFY_OPTIONAL   ? "optional"
                                    : e->status == AL_VERIFY_MATCH    ? "matched"
                                    : e->status == AL_VERIFY_MISMATCH ? "mismatched"
                                    : e->status == AL_VERIFY_MISSING  ? "missing"
                                                                      : "unexpected");
            if (e->bytes >= 0) cJSON_AddNumberToObject(t, "bytes", (double)e->bytes);
            if (e->sha256[0]) cJSON_AddStringToObject(t, "sha256", e->sha256);
            if (e->expected[0]) cJSON_AddStringToObject(t, "expected", e->expected);
            if (e->note[0]) cJSON_AddStringToObject(t, "note", e->note);
            cJSON_AddItemToArray(ts, t);
        }
        cli_print_json(j, 0);
    } else {
        if (!quiet)
            for (int i = 0; i < r.n; i++) {
                const al_verify_entry *e = &r.entries[i];
                printf("%-10s %s%s%s\n", status_name(e->status), e->name, e->note[0] ? "  # " : "",
                       e->note);
            }
        printf("%s (%s) against %s:\n  %d matched, %d mismatched, %d missing, %d unexpected, %d "
               "optional absent\n",
               model, r.format, r.table, r.matched, r.mismatched, r.missing, r.unexpected,
               r.optional_absent);
        if (!ok)
            printf("FAILED: %s\n",
                   present == 0 ? "no tensor to verify" : "some tensors do not match the table");
        else if (r.complete)
            printf("OK: every tensor matches; the model is complete\n");
        else
            printf("OK: every tensor present matches; the model is INCOMPLETE (%d missing)\n",
                   r.missing);
    }
    al_verify_report_free(&r);
    return ok ? 0 : 1;
}
