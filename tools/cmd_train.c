/* cmd_train.c: attnlim train: a GPT-2-style decoder trained in C with a chosen attention
 * normalizer (src/train). */
#include "cli.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

/* The numeric options first: their ids index the ranges in cmd_train's nums[]. */
enum {
    O_LAYERS,
    O_HEADS,
    O_EMBD,
    O_CTX,
    O_BATCH,
    O_SEQ,
    O_STEPS,
    O_WARMUP,
    O_EVAL_EVERY,
    O_VAL_WINDOWS,
    O_CKPT_EVERY,
    O_STOP_AFTER,
    O_THREADS,
    O_LR,
    O_MIN_LR_FRAC,
    O_WEIGHT_DECAY,
    O_BETA1,
    O_BETA2,
    O_CLIP,
    O_VAL_FRAC,
    O_TEMPERATURE,
    O_ALPHA,
    O_SSMAX_S,
    O_SEED,
    N_NUMS,
    O_JSON = N_NUMS,
    O_QUIET,
    O_RESUME,
    O_FIXED_BATCH,
    O_SSMAX_LEARN,
    O_OUT,
    O_CORPUS,
    O_DATA_DIR,
    O_TOKENIZER,
    O_INIT,
    O_DUMP,
    O_NORMALIZER,
    O_NORMALIZER_MOVED
};
#define ID(x) ((x) + 1) /* ids are > 0 */
static const cli_opt opts[] = {
    {ID(O_OUT), "--out", "DIR", "the output directory (required)"},
    CLI_TEXT("model:"),
    {ID(O_LAYERS), "--layers", "L", "4"},
    {ID(O_HEADS), "--heads", "H", "4"},
    {ID(O_EMBD), "--embd", "C", "128"},
    {ID(O_CTX), "--ctx", "N", "256"},
    CLI_TEXT("normalizer:"),
    {ID(O_NORMALIZER), "--attention-normalizer", "M",
     "softmax (default), sparsemax, entmax15, entmax, ssmax, sa-softmax,\nsa-softmax-norm"},
    {ID(O_NORMALIZER_MOVED), "--normalizer", "M",
     "refused: the trained normalizer is --attention-normalizer (--normalizer\n"
     "is reproduce's and diagnose's re-normalisation of captured logits)"},
    {ID(O_TEMPERATURE), "--temperature", "T", "1"},
    {ID(O_ALPHA), "--alpha", "A", "entmax alpha (1.5)"},
    {ID(O_SSMAX_S), "--ssmax-s", "S", "0.43"},
    {ID(O_SSMAX_LEARN), "--ssmax-learn", NULL, "s learnable per layer and head"},
    CLI_TEXT("data:"),
    {ID(O_CORPUS), "--corpus", "C", "war-and-peace (METHOD's body, the default) or a FILE"},
    {ID(O_DATA_DIR), "--data-dir", "DIR", "where the shared data files are"},
    {ID(O_TOKENIZER), "--tokenizer", "bytes|gpt2", "bytes (default)"},
    {ID(O_VAL_FRAC), "--val-frac", "F", "0.1: the held-out tail"},
    CLI_TEXT("batch:"),
    {ID(O_BATCH), "--batch", "B", "8"},
    {ID(O_SEQ), "--seq", "T", "the context"},
    {ID(O_SEED), "--seed", "S", "1: init and data order"},
    {ID(O_FIXED_BATCH), "--fixed-batch", NULL, "every step on step 0's batch"},
    CLI_TEXT("optimizer:"),
    {ID(O_STEPS), "--steps", "N", "100"},
    {ID(O_LR), "--lr", "X", "1e-3"},
    {ID(O_WARMUP), "--warmup", "N", "10"},
    {ID(O_MIN_LR_FRAC), "--min-lr-frac", "F", "0.1"},
    {ID(O_WEIGHT_DECAY), "--weight-decay", "X", "0.1, 2-D tensors"},
    {ID(O_BETA1), "--beta1", "X", "0.9"},
    {ID(O_BETA2), "--beta2", "X", "0.95"},
    {ID(O_CLIP), "--clip", "X", "1.0, global norm; 0 off"},
    CLI_TEXT("run:"),
    {ID(O_EVAL_EVERY), "--eval-every", "K",
     "50: validation loss, gradient norms per layer, per-head\n"
     "entropy, max weight and N_s/N into the log"},
    {ID(O_VAL_WINDOWS), "--val-windows", "N", "16"},
    {ID(O_CKPT_EVERY), "--ckpt-every", "K", "0: at the end"},
    {ID(O_STOP_AFTER), "--stop-after", "N", "stop after N steps, saved"},
    {ID(O_RESUME), "--resume", NULL, "continue DIR's run bit for bit: give the same options"},
    {ID(O_INIT), "--init", "PATH", "start from a GPT-2 checkpoint's weights"},
    {ID(O_DUMP), "--dump", "FILE", "the first step: batch, loss, gradients, updated weights"},
    {ID(O_THREADS), "--threads", "N", "compute threads"},
    {ID(O_QUIET), "--quiet", NULL, "no progress (a bar on a TTY, else plain lines)"},
    {ID(O_JSON), "--json", NULL, "print a JSON summary"},
    CLI_OPT_END,
};

static void usage(FILE *f) {
    fprintf(
        f, "usage: attnlim train --out DIR [options]\n"
           "\n"
           "Trains a GPT-2-style decoder (pre-LayerNorm, tanh GELU MLP, learned positions, tied\n"
           "embeddings) with AdamW on a corpus, with the attention normalizer of your choice, and\n"
           "writes DIR/model.safetensors + DIR/config.json (HF GPT-2 layout, the normalizer in\n"
           "\"attnlim_normalizer\"), DIR/state.bin (for --resume) and DIR/log.jsonl.\n"
           "\n");
    cli_print_options(f, opts, 22);
    fprintf(f,
            "\n"
            "Checkpoints of softmax (T = 1) runs are ordinary GPT-2s: every command and HF\n"
            "transformers load them. Every other command runs a checkpoint of another normalizer\n"
            "(any temperature, a learnt ssmax s per head, sa-softmax) with that normalizer as\n"
            "the model's own attention (--attention-normalizer overrides it).\n");
}

typedef struct numopt {
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

static void print_summary(const al_train_opts *o, const al_train_summary *s, int json) {
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "out", o->out);
        cJSON_AddStringToObject(j, "normalizer", al_norm_name(o->norm.kind));
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
    al_train_opts o;
    al_train_defaults(&o);
    int json = 0, quiet = 0, seq = 0, threads = 0;
    al_error err = {0};
    const numopt nums[N_NUMS] = {
        [O_LAYERS] = {1, 1, 256, &o.n_layer},
        [O_HEADS] = {1, 1, 1024, &o.n_head},
        [O_EMBD] = {1, 1, 8192, &o.n_embd},
        [O_CTX] = {1, 1, 8192, &o.n_ctx},
        [O_BATCH] = {1, 1, 4096, &o.B},
        [O_SEQ] = {1, 1, 8192, &seq},
        [O_STEPS] = {1, 0, 1e9, &o.steps},
        [O_WARMUP] = {1, 0, 1e9, &o.warmup},
        [O_EVAL_EVERY] = {1, 0, 1e9, &o.eval_every},
        [O_VAL_WINDOWS] = {1, 1, 1e6, &o.val_windows},
        [O_CKPT_EVERY] = {1, 0, 1e9, &o.ckpt_every},
        [O_STOP_AFTER] = {1, 0, 1e9, &o.stop_after},
        [O_THREADS] = {1, 0, 4096, &threads},
        [O_LR] = {0, 1e-12, 10, &o.lr},
        [O_MIN_LR_FRAC] = {0, 0, 1, &o.min_lr_frac},
        [O_WEIGHT_DECAY] = {0, 0, 10, &o.weight_decay},
        [O_BETA1] = {0, 0, 0.999999, &o.beta1},
        [O_BETA2] = {0, 0, 0.999999, &o.beta2},
        [O_CLIP] = {0, 0, 1e9, &o.clip},
        [O_VAL_FRAC] = {0, 1e-6, 0.49, &o.val_frac},
        [O_TEMPERATURE] = {0, 1e-6, 1e6, &o.norm.temperature},
        [O_ALPHA] = {0, 1.000001, 100, &o.norm.alpha},
        [O_SSMAX_S] = {0, 1e-3, 1e3, &o.norm.ssmax_s},
    };
    const char *norm_name = "softmax", *v;
    cli_parser p = {"train", argc, argv, opts, usage};
    for (int id; (id = cli_next(&p, &v)) != CLI_END;) {
        if (id == CLI_STOP) return p.status;
        int k = id - 1;
        const char **str = k == O_OUT          ? &o.out
                           : k == O_CORPUS     ? &o.corpus
                           : k == O_DATA_DIR   ? &o.data_path
                           : k == O_TOKENIZER  ? &o.tokenizer
                           : k == O_INIT       ? &o.init
                           : k == O_DUMP       ? &o.dump
                           : k == O_NORMALIZER ? &norm_name
                                               : NULL;
        if (str) *str = v;
        if (k == O_NORMALIZER_MOVED) return cli_usage_error("train", "%s", CLI_NORMALIZER_MOVED);
        if (k == O_JSON) json = 1;
        if (k == O_QUIET) quiet = 1;
        if (k == O_RESUME) o.resume = 1;
        if (k == O_FIXED_BATCH) o.fixed_batch = 1;
        if (k == O_SSMAX_LEARN) o.ssmax_learn = 1;
        if (k == O_SEED && cli_parse_u64(v, p.opt, &o.seed, &err))
            return cli_usage_error("train", "%s", err.msg);
        if (k >= N_NUMS || k == O_SEED) continue;
        if (nums[k].is_int) {
            long x;
            if (cli_parse_int(v, p.opt, (long)nums[k].lo, (long)nums[k].hi, &x, &err))
                return cli_usage_error("train", "%s", err.msg);
            *(int *)nums[k].dst = (int)x;
        } else {
            double x;
            if (cli_parse_double(v, p.opt, &x, &err))
                return cli_usage_error("train", "%s", err.msg);
            if (!(x >= nums[k].lo && x <= nums[k].hi))
                return cli_usage_error("train", "%s %s outside [%g, %g]", p.opt, v, nums[k].lo,
                                       nums[k].hi);
            *(double *)nums[k].dst = x;
        }
    }
    if (!o.out) return cli_usage_error("train", "--out DIR is required");
    if (parse_norm(norm_name, &o.norm)) return 2;
    o.T = seq ? seq : o.n_ctx;
    if (o.T > o.n_ctx)
        return cli_usage_error("train", "--seq %d is longer than --ctx %d", o.T, o.n_ctx);
    if (o.n_embd % o.n_head)
        return cli_usage_error("train", "--embd %d is not a multiple of --heads %d", o.n_embd,
                               o.n_head);
    if (o.ssmax_learn && o.norm.kind != AL_NORM_SSMAX)
        return cli_usage_error("train", "--ssmax-learn is for --attention-normalizer ssmax");
    if (threads) al_set_threads(threads);
    o.progress = quiet ? 0 : isatty(2) ? 1 : 2; /* not a TTY: plain periodic lines */
    al_train_summary s;
    if (al_train(&o, &s, &err)) return cli_fail("train", &err);
    print_summary(&o, &s, json);
    return 0;
}
