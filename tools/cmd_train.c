/* cmd_train.c: attnlim train: a GPT-2-style decoder trained in C with a chosen attention
 * normalizer (src/train). */
#include "cli.h"
#include "ops.h"
#include "train_io.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(
        f, "usage: attnlim train --out DIR [options]\n"
           "\n"
           "Trains a GPT-2-style decoder (pre-LayerNorm, tanh GELU MLP, learned positions, tied\n"
           "embeddings) with AdamW on a corpus, with the attention normalizer of your choice, and\n"
           "writes DIR/model.safetensors + DIR/config.json (HF GPT-2 layout, the normalizer in\n"
           "\"attnlim_normalizer\"), DIR/state.bin (for --resume) and DIR/log.jsonl.\n"
           "\n"
           "model:      --layers L (4) --heads H (4) --embd C (128) --ctx N (256)\n"
           "normalizer: --attention-normalizer softmax|sparsemax|entmax15|entmax|ssmax|\n"
           "            sa-softmax|sa-softmax-norm (softmax) --temperature T (1) --alpha A "
           "(entmax, 1.5)\n"
           "            --ssmax-s S (0.43) --ssmax-learn (s learnable per layer and head)\n"
           "data:       --corpus war-and-peace|FILE (war-and-peace: METHOD's body) --data-dir DIR\n"
           "            --tokenizer bytes|gpt2 (bytes) --val-frac F (0.1: the held-out tail)\n"
           "batch:      --batch B (8) --seq T (the context) --seed S (1: init and data order)\n"
           "            --fixed-batch (every step on step 0's batch)\n"
           "optimizer:  --steps N (100) --lr X (1e-3) --warmup N (10) --min-lr-frac F (0.1)\n"
           "            --weight-decay X (0.1, 2-D tensors) --beta1 (0.9) --beta2 (0.95)\n"
           "            --clip X (1.0, global norm; 0 off)\n"
           "run:        --eval-every K (50: validation loss, gradient norms per layer, per-head\n"
           "            entropy, max weight and N_s/N into the log) --val-windows N (16)\n"
           "            --ckpt-every K (0: at the end) --stop-after N (stop after N steps, saved)\n"
           "            --resume (continue DIR's run bit for bit: give the same options)\n"
           "            --init PATH (start from a GPT-2 checkpoint's weights)\n"
           "            --dump FILE (the first step: batch, loss, gradients, updated weights)\n"
           "            --threads N --quiet --json\n"
           "\n"
           "Checkpoints of softmax (T = 1) runs are ordinary GPT-2s: every command and HF\n"
           "transformers load them. Every other command runs a checkpoint of another normalizer\n"
           "(any temperature, a learnt ssmax s per head, sa-softmax) with that normalizer as\n"
           "the model's own attention (--attention-normalizer overrides it).\n");
}

typedef struct numopt {
    const char *name;
    int is_int;
    double lo, hi;
    void *dst;
} numopt;

static int parse_norm(const char *name, al_norm *nm) {
    al_norm keep = *nm;
    al_error e = {0};
    if (al_norm_parse(name, nm, &e)) return cli_usage_error("train", "%s", e.msg);
    nm->temperature = keep.temperature, nm->alpha = keep.alpha, nm->ssmax_s = keep.ssmax_s;
    return 0;
}

static void print_summary(const al__tr_run_opts *o, const al__tr_summary *s, int json) {
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "out", o->out);
        cJSON_AddStringToObject(j, "normalizer", al_norm_name(o->cfg.norm.kind));
        cJSON_AddNumberToObject(j, "steps_done", s->steps_done);
        cJSON_AddItemToObject(j, "loss", cli_json_num(s->last_loss));
        cJSON_AddItemToObject(j, "val_loss", cli_json_num(s->val_loss));
        cJSON_AddNumberToObject(j, "tokens_per_s", s->tokens_per_s);
        cJSON_AddNumberToObject(j, "seconds", s->seconds);
        cli_print_json(j, 0);
    } else {
        printf("%s: %d steps, loss %.4f, validation loss %.4f, %.0f tokens/s\n", o->out,
               s->steps_done, s->last_loss, s->val_loss, s->tokens_per_s);
    }
}

int cmd_train(int argc, char **argv) {
    al__tr_run_opts o;
    al__tr_run_defaults(&o);
    int json = 0, quiet = 0, seq = 0, threads = 0;
    double seed = 1;
    al_error err = {0};
    numopt nums[] = {
        {"--layers", 1, 1, 256, &o.cfg.n_layer},
        {"--heads", 1, 1, 1024, &o.cfg.n_head},
        {"--embd", 1, 1, 8192, &o.cfg.n_embd},
        {"--ctx", 1, 1, 8192, &o.cfg.n_ctx},
        {"--batch", 1, 1, 4096, &o.B},
        {"--seq", 1, 1, 8192, &seq},
        {"--steps", 1, 0, 1e9, &o.opt.steps},
        {"--warmup", 1, 0, 1e9, &o.opt.warmup},
        {"--eval-every", 1, 0, 1e9, &o.eval_every},
        {"--val-windows", 1, 1, 1e6, &o.val_windows},
        {"--ckpt-every", 1, 0, 1e9, &o.ckpt_every},
        {"--stop-after", 1, 0, 1e9, &o.stop_after},
        {"--threads", 1, 0, 4096, &threads},
        {"--lr", 0, 1e-12, 10, &o.opt.lr},
        {"--min-lr-frac", 0, 0, 1, &o.opt.min_lr_frac},
        {"--weight-decay", 0, 0, 10, &o.opt.weight_decay},
        {"--beta1", 0, 0, 0.999999, &o.opt.beta1},
        {"--beta2", 0, 0, 0.999999, &o.opt.beta2},
        {"--clip", 0, 0, 1e9, &o.opt.clip},
        {"--val-frac", 0, 1e-6, 0.49, &o.val_frac},
        {"--temperature", 0, 1e-6, 1e6, &o.cfg.norm.temperature},
        {"--alpha", 0, 1.000001, 100, &o.cfg.norm.alpha},
        {"--ssmax-s", 0, 1e-3, 1e3, &o.cfg.norm.ssmax_s},
        {"--seed", 0, 0, 9007199254740992.0, &seed},
    };
    const char *norm_name = "softmax";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "--quiet"))
            quiet = 1;
        else if (!strcmp(a, "--resume"))
            o.resume = 1;
        else if (!strcmp(a, "--fixed-batch"))
            o.fixed_batch = 1;
        else if (!strcmp(a, "--ssmax-learn"))
            o.cfg.ssmax_learn = 1;
        else if (!strcmp(a, "--normalizer"))
            return cli_normalizer_moved("train");
        else if (i + 1 >= argc)
            return cli_usage_error("train", "unknown option or missing value: '%s'", a);
        else if (!strcmp(a, "--out"))
            o.out = argv[++i];
        else if (!strcmp(a, "--corpus"))
            o.corpus = argv[++i];
        else if (!strcmp(a, "--data-dir"))
            o.data_path = argv[++i];
        else if (!strcmp(a, "--tokenizer"))
            o.tokenizer = argv[++i];
        else if (!strcmp(a, "--init"))
            o.init = argv[++i];
        else if (!strcmp(a, "--dump"))
            o.dump = argv[++i];
        else if (!strcmp(a, "--attention-normalizer"))
            norm_name = argv[++i];
        else {
            int k = -1;
            for (int j = 0; j < (int)(sizeof nums / sizeof nums[0]); j++)
                if (!strcmp(a, nums[j].name)) k = j;
            if (k < 0) return cli_usage_error("train", "unknown option '%s'", a);
            const char *v = argv[++i];
            if (nums[k].is_int) {
                long x;
                if (cli_parse_int(v, a, (long)nums[k].lo, (long)nums[k].hi, &x, &err))
                    return cli_usage_error("train", "%s", err.msg);
                *(int *)nums[k].dst = (int)x;
            } else {
                double x;
                if (cli_parse_double(v, a, &x, &err))
                    return cli_usage_error("train", "%s", err.msg);
                if (!(x >= nums[k].lo && x <= nums[k].hi))
                    return cli_usage_error("train", "%s %s outside [%g, %g]", a, v, nums[k].lo,
                                           nums[k].hi);
                *(double *)nums[k].dst = x;
            }
        }
    }
    if (!o.out) return cli_usage_error("train", "--out DIR is required");
    if (parse_norm(norm_name, &o.cfg.norm)) return 2;
    if (seed != floor(seed)) return cli_usage_error("train", "--seed must be an integer");
    o.seed = (uint64_t)seed;
    o.T = seq ? seq : o.cfg.n_ctx;
    if (o.T > o.cfg.n_ctx)
        return cli_usage_error("train", "--seq %d is longer than --ctx %d", o.T, o.cfg.n_ctx);
    if (o.cfg.n_embd % o.cfg.n_head)
        return cli_usage_error("train", "--embd %d is not a multiple of --heads %d", o.cfg.n_embd,
                               o.cfg.n_head);
    if (o.cfg.ssmax_learn && o.cfg.norm.kind != AL_NORM_SSMAX)
        return cli_usage_error("train", "--ssmax-learn is for --attention-normalizer ssmax");
    if (threads) al__set_threads(threads);
    o.progress = !quiet && isatty(2);
    al__tr_summary s;
    if (al__tr_run(&o, &s, &err)) return cli_fail("train", &err);
    print_summary(&o, &s, json);
    return 0;
}
