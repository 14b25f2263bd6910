/* gpt2.c: the GPT-2 forward pass (fp32) with the streaming capture of attnlim.h.
 *
 *   x = wte[tokens] + wpe[0..T)                                  embed [T, C]
 *   per layer: x += proj(attention(ln_1(x)));  x += fc_proj(gelu_tanh(fc(ln_2(x))))
 *   final_hidden = ln_f(x);  logits = final_hidden @ wte[0..V)^T (only when asked)
 *
 * Weights come from the loaders (gpt2_load.c) in either layout (HF Conv1D [in, out] or llm.c
 * [out, in]). Activations live in one arena per model sized for the longest window run so far
 * (grown when a longer one comes, never for n_ctx up front: a config claiming a huge context
 * costs nothing until a window that long is run; inference only: one layer's at a time). A model
 * runs one forward at a time (the arena and the attention buffers are the model's). */
#include "gpt2.h"
#include "ops.h"
#include "safetensors.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The activation arena: every buffer for T = cap tokens (cap: the longest window so far). */
typedef struct gpt2_acts {
    int cap;        /* tokens the buffers hold */
    float *mem;     /* the one allocation holding everything below */
    float *x;       /* [cap, C] residual stream */
    float *embed;   /* [cap, C] token + position embedding (kept for the capture) */
    float *ln;      /* [cap, C] ln_1 / ln_2 / ln_f output */
    float *qkv;     /* [cap, 3C] q | k | v, head h at columns h*d_head of each */
    float *atty;    /* [cap, C] concatenated head outputs */
    float *proj;    /* [cap, C] output of a projection, added to x */
    float *fch;     /* [cap, 4C] MLP hidden, GELU in place */
    al__attn_ws ws; /* attention scratch and capture buffers, kept across layers */
} gpt2_acts;

static void free_acts(gpt2_acts *a) {
    if (!a) return;
    free(a->mem);
    al__attn_ws_free(&a->ws);
    free(a);
}

static int build_acts(const al__gpt2 *g, int T_need, gpt2_acts **out, al_error *err) {
    size_t T = (size_t)T_need, C = (size_t)g->d_model;
    size_t sizes[7] = {T * C, T * C, T * C, T * 3 * C, T * C, T * C, T * 4 * C};
    size_t total = 0;
    for (int i = 0; i < 7; i++) {
        size_t aligned = (sizes[i] + 15) & ~(size_t)15; /* 64-byte aligned buffers */
        if (!al__add_ok(total, aligned, &total))
            return al__err(err, AL_E_NOMEM, "GPT-2 activations: size overflows");
    }
    size_t bytes;
    if (!al__mul_ok(total, sizeof(float), &bytes))
        return al__err(err, AL_E_NOMEM, "GPT-2 activations: size overflows");
    gpt2_acts *a = al__calloc(1, sizeof *a, "GPT-2 activation state", err);
    if (!a) return AL_E_NOMEM;
    a->mem = al__malloc_aligned(bytes, "GPT-2 activations", err);
    if (!a->mem) {
        free(a);
        return AL_E_NOMEM;
    }
    a->cap = T_need;
    float **ptrs[7] = {&a->x, &a->embed, &a->ln, &a->qkv, &a->atty, &a->proj, &a->fch};
    float *p = a->mem;
    for (int i = 0; i < 7; i++) {
        *ptrs[i] = p;
        p += (sizes[i] + 15) & ~(size_t)15;
    }
    *out = a;
    return 0;
}

/* y[T, out] = x[T, in] @ W + b, W stored [in, out] (HF) or [out, in] (llm.c) */
static void linear(const al__gpt2 *g, float *y, const float *x, const float *W, const float *b,
                   int T, int in, int out) {
    if (g->out_in)
        al__matmul_nt(y, x, W, b, T, in, out);
    else
        al__matmul(y, x, W, b, T, in, out);
}

static int gpt2_forward(al_model *m, const int32_t *tokens, int T, const al_capture_request *req,
                        const al__fwd *f, float *logits, float *final_hidden, al_error *err) {
    al__gpt2 *g = m->impl;
    if (!g) return al__err(err, AL_E_INVALID, "%s: model not loaded", m->info.path);
    if (T < 1 || T > g->n_ctx)
        return al__err(err, AL_E_INVALID, "%s: window of %d tokens outside 1..%d", m->info.path, T,
                       g->n_ctx);
    if (!g->fwd || ((gpt2_acts *)g->fwd)->cap < T) { /* sized by need */
        gpt2_acts *fresh = NULL;
        int rc = build_acts(g, T, &fresh, err);
        if (rc) return rc;
        free_acts(g->fwd);
        g->fwd = fresh;
    }
    gpt2_acts *a = g->fwd;
    const int C = g->d_model, H = g->n_head, L = g->n_layer;

    /* embeddings */
    for (int t = 0; t < T; t++) {
        int tok = tokens[t];
        if (tok < 0 || tok >= g->vocab_size)
            return al__err(err, AL_E_INVALID, "token id %d at position %d outside [0, %d)", tok, t,
                           g->vocab_size);
        const float *te = g->wte + (size_t)tok * C, *pe = g->wpe + (size_t)t * C; /* [C] */
        float *xt = a->x + (size_t)t * C;
        for (int c = 0; c < C; c++) xt[c] = te[c] + pe[c];
    }
    int want_embed = req && req->fn && (req->what & AL_CAP_EMBED);
    if (want_embed) memcpy(a->embed, a->x, (size_t)T * C * sizeof(float));

    int ln_done = 0; /* a->ln holds this layer's ln_1(x) already (the previous layer's final add) */
    for (int l = 0; l <= f->last; l++) {
        const al__gpt2_layer *w = &g->layers[l];
        int r0 = al__fwd_row0(f, l, L), M = T - r0;
        float *x = a->x + (size_t)r0 * C; /* [M, C] */
        if (!ln_done) al__layernorm(a->ln, a->x, w->ln1_w, w->ln1_b, T, C, 1e-5f);
        linear(g, a->qkv, a->ln, w->attn_w, w->attn_b, T, C, 3 * C);
        al__attn at = al__attn_fused(l, T, H, C, 1, a->qkv, a->atty, a->ln,
                                     want_embed ? a->embed : NULL, req);
        at.mod = al__model_attn(m);
        at.ssmax_s = m->attn_is_own && m->own_s ? m->own_s + (size_t)l * H : NULL;
        at.residual = a->x; /* the layer input, before ln_1 */
        at.row0 = r0;
        int rc = al__attention_ws(&at, &a->ws, err);
        if (rc) return rc;
        linear(g, a->proj, a->atty + (size_t)r0 * C, w->proj_w, w->proj_b, M, C, C);
        al__add_layernorm(x, a->proj, a->ln, w->ln2_w, w->ln2_b, M, C, 1e-5f); /* x += proj */
        linear(g, a->fch, a->ln, w->fc_w, w->fc_b, M, C, 4 * C);
        al__gelu_tanh(a->fch, (size_t)M * 4 * C);
        linear(g, a->proj, a->fch, w->fcproj_w, w->fcproj_b, M, 4 * C, C);
        /* x += proj, in one pass with the next norm into a->ln: the next layer's ln_1 (when
         * it covers all T rows: r0 = 0) or ln_f of the output rows [r0, T) (the top layer) */
        const float *nw = NULL, *nb = NULL;
        if (l < f->last && r0 == 0)
            nw = g->layers[l + 1].ln1_w, nb = g->layers[l + 1].ln1_b;
        else if (l == L - 1 && (logits || final_hidden))
            nw = g->lnf_w, nb = g->lnf_b;
        if (nw)
            al__add_layernorm(x, a->proj, a->ln, nw, nb, M, C, 1e-5f);
        else
            al__add(x, a->proj, (size_t)M * C);
        ln_done = nw != NULL;
    }

    if (!logits && !final_hidden) return 0;
    int M = T - f->row0;              /* the output rows [row0, T) */
    if (!ln_done || f->last != L - 1) /* ln_f not done with the top layer's add */
        al__layernorm(a->ln, a->x + (size_t)f->row0 * C, g->lnf_w, g->lnf_b, M, C, 1e-5f);
    if (final_hidden) memcpy(final_hidden, a->ln, (size_t)M * C * sizeof(float));
    /* LM head tied to wte: logits [M, V] = ln_f(x) [M, C] @ wte[0..V) [V, C]^T */
    if (logits) al__matmul_nt(logits, a->ln, g->wte, NULL, M, C, g->vocab_size);
    return 0;
}

void al__gpt2_release(al__gpt2 *g) {
    if (!g) return;
    free(g->layers);
    free(g->arena);
    al__unmap(&g->map);
    al__st_close(g->st);
    free(g->tok_dir);
    free(g);
}

static void gpt2_destroy(al_model *m) {
    al__gpt2 *g = m->impl;
    if (g) {
        free_acts(g->fwd);
        g->fwd = NULL;
    }
    al__gpt2_release(g);
    m->impl = NULL;
}

/* GPT-2's own BPE files (encoder.json + vocab.bpe, found by al_data_find). */
static int gpt2_tokenizer(al_model *m, al_tokenizer **out, al_error *err) {
    const al__gpt2 *g = m->impl;
    if (g && g->tok_dir) return al_tokenizer_open_bpe(g->tok_dir, "gpt2", out, err);
    return al_tokenizer_open_gpt2(NULL, out, err);
}

/* The files GPT-2 is read from: an HF checkpoint's config, index and shards, or the llm.c file
 * (its header is the config). */
static int gpt2_files(al_model *m, al__model_files *fs, al_error *err) {
    if (m->format == AL__FMT_SAFETENSORS) return al__model_files_safetensors(m, fs, err);
    return al__model_files_add(fs, m->info.path, "weights", err);
}

/* What gpt2_tokenizer opens: the shared GPT-2 BPE files. */
static int gpt2_tokenizer_files(al_model *m, al__model_files *fs, al_error *err) {
    const al__gpt2 *g = m->impl;
    char p[4096 + 64];
    if (g && g->tok_dir) {
        snprintf(p, sizeof p, "%s/vocab.json", g->tok_dir);
        int rc = al__model_files_add(fs, p, "tokenizer", err);
        snprintf(p, sizeof p, "%s/merges.txt", g->tok_dir);
        return rc ? rc : al__model_files_add(fs, p, "tokenizer", err);
    }
    int rc = al_data_find("gpt2/encoder.json", NULL, p, sizeof p, err);
    if (!rc) rc = al__model_files_add(fs, p, "tokenizer", err);
    if (!rc) rc = al_data_find("gpt2/vocab.bpe", NULL, p, sizeof p, err);
    if (!rc) rc = al__model_files_add(fs, p, "tokenizer", err);
    return rc;
}

const al_model_vtable al__gpt2_vtable = {.forward = gpt2_forward,
                                         .destroy = gpt2_destroy,
                                         .tokenizer = gpt2_tokenizer,
                                         .files = gpt2_files,
                                         .tokenizer_files = gpt2_tokenizer_files,
                                         .variants = 1};
