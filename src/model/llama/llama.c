/* llama.c: Llama-family decoders (SmolLM2, Llama 2/3-shaped models) from GGUF files: the
 * weights dequantised to float32 at load, the forward with the streaming capture; the
 * tokenizer from the GGUF metadata is gguf_tokenizer.c's.
 *
 * Forward (C = d_model, H query heads, G key/value heads, d = C / H, F = d_ff, V = vocab):
 *   x = tok_embd[tokens]                                       [T, C]
 *   per layer:  h = rmsnorm(x) * attn_norm
 *               q = h Wq^T [T, H*d], k = h Wk^T [T, G*d], v = h Wv^T [T, G*d]
 *               rope(q), rope(k)         (rotate_half pairs (i, i + d/2), theta_i = base^(-2i/d))
 *               o = attention(q, k, v)   (causal; query head h reads kv head h / (H / G))
 *               x += o Wo^T
 *               h = rmsnorm(x) * ffn_norm
 *               x += (silu(h Wgate^T) * (h Wup^T)) Wdown^T
 *   y = rmsnorm(x) * output_norm; logits = y Wout^T (Wout = tok_embd when the file has no output)
 *
 * Q/K layout: llama.cpp's converter permutes the rows of each head of q_proj and k_proj so that
 * RoPE rotates adjacent pairs (2i, 2i+1) of the GGUF rows; GGUF row h*d + 2i + s holds HF row
 * h*d + s*d/2 + i. We undo that permutation at load, so q and k (and their capture) are in the
 * HF layout and RoPE rotates (i, i + d/2) as HF's rotate_half does; q.k is the same either way. */
#include "llama.h"

#include "gguf.h"
#include "hf_config.h"
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- loading ------------------------------------------------------------------------------ */

/* One weight to load: its GGUF name, dims (ne order: fastest first) and where it goes. */
typedef struct wspec {
    char name[96];
    int n_dims;
    int64_t ne[2];
    float **dst;
    int permute_heads; /* > 0: undo the converter's q/k row permutation with this many heads */
} wspec;

static int check_spec(const al__gguf *g, const wspec *w, al_error *err) {
    const al__gguf_tensor *t = al__gguf_tensor_find(g, w->name);
    if (!t) return al__err(err, AL_E_FORMAT, "%s: tensor '%s' is missing", g->name, w->name);
    int ok = 1;
    for (int d = 0; d < AL_GGUF_MAX_DIMS; d++)
        ok &= t->ne[d] == (d < w->n_dims && d < 2 ? w->ne[d] : 1);
    if (!ok)
        return al__err(
            err, AL_E_FORMAT,
            "%s: tensor '%s' has dims [%lld, %lld, %lld, %lld], expected [%lld%s%lld] for the "
            "model's hyperparameters",
            g->name, w->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
            (long long)t->ne[3], (long long)w->ne[0], w->n_dims > 1 ? ", " : "",
            w->n_dims > 1 ? (long long)w->ne[1] : 0LL);
    if (!al__ggml_can_dequant(t->type))
        return al__err(
            err, AL_E_UNSUPPORTED,
            "%s: tensor '%s' has type %s, which is not supported (supported: F32, F16, BF16, Q4_0, "
            "Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)",
            g->name, w->name, al__ggml_type_name(t->type));
    return 0;
}

/* Undoes the row permutation of one q or k matrix W [n_heads*d, C] in place. */
static int unpermute_qk(float *W, int n_heads, int d, int C, al_error *err) {
    size_t head = (size_t)d * C;
    float *tmp = al__malloc(head * sizeof *tmp, "q/k permutation", err); /* [d, C] */
    if (!tmp) return AL_E_NOMEM;
    for (int h = 0; h < n_heads; h++) {
        float *Wh = W + (size_t)h * head; /* [d, C] */
        memcpy(tmp, Wh, head * sizeof *tmp);
        for (int i = 0; i < d / 2; i++)
            for (int s = 0; s < 2; s++)
                memcpy(Wh + (size_t)(s * (d / 2) + i) * C, tmp + (size_t)(2 * i + s) * C,
                       (size_t)C * sizeof *tmp);
    }
    free(tmp);
    return 0;
}

/* Reads the hyperparameters from the metadata, checking them against sane bounds. */
/* "<arch>.<key>" into buf. */
static const char *K(char *buf, const char *arch, const char *key) {
    snprintf(buf, 128, "%s.%s", arch, key);
    return buf;
}

/* Gemma 2's metadata: sliding window, soft-caps (absent or 0: none); its converter stores the
 * norms as 1 + w already, and the logit scale is 1/sqrt(key_length) as llama.cpp takes it
 * (GGUF has no query_pre_attn_scalar). */
static int read_gemma2(const al__gguf *g, llama *L, al_error *err) {
    al__llama_config *c = &L->cfg;
    char k[128];
    int64_t v;
    double f;
    int rc = 0;
    c->gemma = 1, c->gelu = 1, c->alt_window = 1, c->tied = 1;
    c->embed_scale = sqrt((double)c->d_model);
    c->attn_scale = 1.0 / sqrt((double)c->d_head);
    if (al__gguf_find(g, K(k, "gemma2", "attention.sliding_window"))) {
        if ((rc = al__gguf_get_int(g, k, 1, c->n_ctx, &v, err))) return rc;
        c->window = (int)v;
    }
    const char *caps[2] = {"attn_logit_softcapping", "final_logit_softcapping"};
    double *dst[2] = {&c->attn_softcap, &c->final_softcap};
    for (int i = 0; i < 2; i++)
        if (al__gguf_find(g, K(k, "gemma2", caps[i]))) {
            if ((rc = al__gguf_get_float(g, k, &f, err))) return rc;
            if (!(f >= 0 && f < 1e6))
                return al__err(err, AL_E_FORMAT, "%s: %s %g is out of range", g->name, k, f);
            *dst[i] = f;
        }
    return 0;
}

/* An optional float key in [lo, hi] into *v (left as it is when absent). */
static int opt_float(const al__gguf *g, const char *key, double lo, double hi, double *v,
                     al_error *err) {
    double f;
    if (!al__gguf_find(g, key)) return 0;
    int rc = al__gguf_get_float(g, key, &f, err);
    if (rc) return rc;
    if (!(f >= lo && f <= hi))
        return al__err(err, AL_E_FORMAT, "%s: %s %g is out of range [%g, %g]", g->name, key, f, lo,
                       hi);
    *v = f;
    return 0;
}

/* rope.scaling.* as llama.cpp writes them: type none / linear / yarn, factor; yarn's
 * original_context_length (the context its correction dims are taken over, HF's
 * max_position_embeddings), attn_factor (a multiplier of 0.1 ln(factor) + 1, as llama.cpp
 * applies it), yarn_beta_fast / yarn_beta_slow. Llama 3.1's rule comes as rope_freqs.weight
 * (read with the weights). */
static int read_rope_scaling(const al__gguf *g, const char *arch, al__llama_config *c,
                             al_error *err) {
    char k[128], stype[32] = "none";
    int rc = 0;
    c->rope.factor = 1.0;
    if (al__gguf_find(g, K(k, arch, "rope.scaling.type")) &&
        (rc = al__gguf_get_str(g, k, stype, sizeof stype, err)))
        return rc;
    if (!strcmp(stype, "none")) return 0;
    if (strcmp(stype, "linear") && strcmp(stype, "yarn"))
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: RoPE scaling type '%s' is not supported (none, linear, yarn are; "
                       "Llama 3's comes as rope_freqs.weight)",
                       g->name, stype);
    c->rope.type = stype[0] == 'l' ? AL__ROPE_LINEAR : AL__ROPE_YARN;
    c->rope.factor = NAN;
    if ((rc = opt_float(g, K(k, arch, "rope.scaling.factor"), 1, 1e6, &c->rope.factor, err)))
        return rc;
    if (isnan(c->rope.factor))
        return al__err(err, AL_E_FORMAT, "%s: RoPE scaling '%s' without %s", g->name, stype,
                       K(k, arch, "rope.scaling.factor"));
    if (c->rope.type != AL__ROPE_YARN) return 0;
    double af = 1, ext = 1;
    int64_t orig = c->n_ctx;
    c->rope.beta_fast = 32, c->rope.beta_slow = 1;
    if (al__gguf_find(g, K(k, arch, "rope.scaling.original_context_length")) &&
        (rc = al__gguf_get_int(g, k, 1, 1 << 24, &orig, err)))
        return rc;
    if ((rc = opt_float(g, K(k, arch, "rope.scaling.attn_factor"), 1e-6, 1e6, &af, err)) ||
        (rc = opt_float(g, K(k, arch, "rope.scaling.yarn_beta_fast"), 0, 1e6, &c->rope.beta_fast,
                        err)) ||
        (rc = opt_float(g, K(k, arch, "rope.scaling.yarn_beta_slow"), 0, 1e6, &c->rope.beta_slow,
                        err)) ||
        (rc = opt_float(g, K(k, arch, "rope.scaling.yarn_ext_factor"), -1, 1e6, &ext, err)))
        return rc;
    if (ext != 1 && ext != -1)
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: rope.scaling.yarn_ext_factor %g is not supported (1, HF's YaRN, is)",
                       g->name, ext);
    c->rope.max_pos = (int)orig;
    c->rope.attn_factor = af * (0.1 * log(c->rope.factor) + 1.0);
    return 0;
}

/* rope_freqs.weight [d/2] (optional): per-frequency divisors of the inverse frequencies. */
static int read_rope_freqs(const al__gguf *g, llama *L, al_error *err) {
    const al__gguf_tensor *t = al__gguf_tensor_find(g, "rope_freqs.weight");
    int half = L->cfg.rope.dim / 2;
    if (!t) return 0;
    if (t->n_dims != 1 || t->ne[0] != half)
        return al__err(err, AL_E_FORMAT,
                       "%s: tensor 'rope_freqs.weight' has dims [%lld, %lld], expected [%d] (half "
                       "the rotary dims %d)",
                       g->name, (long long)t->ne[0], (long long)t->ne[1], half, L->cfg.rope.dim);
    if (!(L->rope_freqs = al__malloc((size_t)half * sizeof(float), "rope_freqs", err)))
        return AL_E_NOMEM;
    int64_t ne[1] = {half};
    int rc = al__gguf_load_f32(g, "rope_freqs.weight", 1, ne, L->rope_freqs, err);
    for (int i = 0; !rc && i < half; i++)
        if (!(L->rope_freqs[i] > 0 && L->rope_freqs[i] < 1e30f))
            rc = al__err(err, AL_E_FORMAT,
                         "%s: rope_freqs.weight[%d] = %g (a frequency divisor must be positive)",
                         g->name, i, (double)L->rope_freqs[i]);
    if (!rc) L->cfg.rope.freq_factors = L->rope_freqs;
    return rc;
}

/* Reads the hyperparameters from the metadata, checking them against sane bounds. GGUF
 * architectures llama, qwen2 (q/k/v biases) and gemma2 share the Llama-family forward. */
static int read_hparams(const al__gguf *g, llama *L, al_error *err) {
    char arch[64], k[128];
    int rc = al__gguf_get_str(g, "general.architecture", arch, sizeof arch, err);
    if (rc) return rc;
    if (strcmp(arch, "llama") && strcmp(arch, "qwen2") && strcmp(arch, "gemma2"))
        return al__err(err, AL_E_UNSUPPORTED,
                       "%s: model architecture '%s' is not supported (GGUF files of architecture "
                       "llama, qwen2, gemma2 are)",
                       g->name, arch);
    int64_t v;
    L->cfg.max_window_layers = -1; /* a Qwen2 HF config's alone */
    if ((rc = al__gguf_get_int(g, K(k, arch, "block_count"), 1, 1024, &v, err))) return rc;
    L->cfg.n_layer = (int)v;
    if ((rc = al__gguf_get_int(g, K(k, arch, "embedding_length"), 2, 65536, &v, err))) return rc;
    L->cfg.d_model = (int)v;
    if ((rc = al__gguf_get_int(g, K(k, arch, "attention.head_count"), 1, 4096, &v, err))) return rc;
    L->cfg.n_head = (int)v;
    L->cfg.n_kv_head = L->cfg.n_head;
    if (al__gguf_find(g, K(k, arch, "attention.head_count_kv"))) {
        if ((rc = al__gguf_get_int(g, k, 1, 4096, &v, err))) return rc;
        L->cfg.n_kv_head = (int)v;
    }
    if ((rc = al__gguf_get_int(g, K(k, arch, "feed_forward_length"), 1, 1 << 20, &v, err)))
        return rc;
    L->cfg.d_ff = (int)v;
    if ((rc = al__gguf_get_int(g, K(k, arch, "context_length"), 1, 1 << 20, &v, err))) return rc;
    L->cfg.n_ctx = (int)v;
    L->cfg.d_head = L->cfg.d_model / L->cfg.n_head;
    if (al__gguf_find(g, K(k, arch, "attention.key_length"))) { /* Gemma 2: head_dim */
        if ((rc = al__gguf_get_int(g, k, 2, 1024, &v, err))) return rc;
        L->cfg.d_head = (int)v;
    } else if (L->cfg.d_model % L->cfg.n_head != 0 || (L->cfg.d_model / L->cfg.n_head) % 2 != 0)
        return al__err(err, AL_E_FORMAT,
                       "%s: embedding_length %d is not an even multiple of head_count %d", g->name,
                       L->cfg.d_model, L->cfg.n_head);
    if (L->cfg.n_head % L->cfg.n_kv_head != 0)
        return al__err(err, AL_E_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d",
                       g->name, L->cfg.n_head, L->cfg.n_kv_head);
    const char *same[] = {"attention.value_length", "rope.dimension_count"};
    for (int i = 0; i < 2; i++)
        if (al__gguf_find(g, K(k, arch, same[i]))) {
            if ((rc = al__gguf_get_int(g, k, 0, 1 << 20, &v, err))) return rc;
            if (v != L->cfg.d_head)
                return al__err(err, AL_E_UNSUPPORTED,
                               "%s: %s = %lld differs from the head size %d (not supported)",
                               g->name, k, (long long)v, L->cfg.d_head);
        }
    snprintf(L->cfg.arch, sizeof L->cfg.arch, "%s", arch);
    L->cfg.qkv_bias = strcmp(arch, "qwen2") == 0;
    double f;
    L->cfg.eps = 1e-5f;
    if (al__gguf_find(g, K(k, arch, "attention.layer_norm_rms_epsilon"))) {
        if ((rc = al__gguf_get_float(g, k, &f, err))) return rc;
        if (!(f > 0 && f < 1))
            return al__err(err, AL_E_FORMAT, "%s: layer_norm_rms_epsilon %g is out of range",
                           g->name, f);
        L->cfg.eps = (float)f;
    }
    L->cfg.rope.base = 10000.0;
    if (al__gguf_find(g, K(k, arch, "rope.freq_base"))) {
        if ((rc = al__gguf_get_float(g, k, &f, err))) return rc;
        if (!(f > 1 && f < 1e12))
            return al__err(err, AL_E_FORMAT, "%s: rope.freq_base %g is out of range", g->name, f);
        L->cfg.rope.base = f;
    }
    const al__gguf_tensor *emb = al__gguf_tensor_find(g, "token_embd.weight");
    if (!emb)
        return al__err(err, AL_E_FORMAT, "%s: tensor 'token_embd.weight' is missing", g->name);
    if (emb->n_dims != 2 || emb->ne[0] != L->cfg.d_model || emb->ne[1] > (1 << 24))
        return al__err(err, AL_E_FORMAT,
                       "%s: token_embd.weight has dims [%lld, %lld], expected [%d, vocab]", g->name,
                       (long long)emb->ne[0], (long long)emb->ne[1], L->cfg.d_model);
    L->cfg.vocab = (int)emb->ne[1];
    L->cfg.rope.dim = L->cfg.d_head;
    L->cfg.rope.max_pos = L->cfg.n_ctx;
    if ((rc = read_rope_scaling(g, arch, &L->cfg, err))) return rc;
    L->cfg.tied = al__gguf_tensor_find(g, "output.weight") == NULL;
    L->cfg.bos_id = L->cfg.eos_id = -1;
    return strcmp(arch, "gemma2") == 0 ? read_gemma2(g, L, err) : 0;
}

static int load_weights(al_model *m, al__gguf *g, llama *L, al_error *err) {
    int C = L->cfg.d_model, H = L->cfg.n_head, G = L->cfg.n_kv_head, d = L->cfg.d_head,
        F = L->cfg.d_ff, V = L->cfg.vocab;
    L->layers = al__calloc((size_t)L->cfg.n_layer, sizeof *L->layers, "llama layers", err);
    int n_spec = 3 + 16 * L->cfg.n_layer;
    wspec *ws = al__calloc((size_t)n_spec, sizeof *ws, "llama weight list", err);
    if (!L->layers || !ws) {
        free(ws);
        return AL_E_NOMEM;
    }
    const al__llama_config *c = &L->cfg;
    int n = 0, tied = al__gguf_tensor_find(g, "output.weight") == NULL;
    int perm = strcmp(c->arch, "llama") == 0; /* only llama's converter permutes q/k rows */
    ws[n++] = (wspec){"token_embd.weight", 2, {C, V}, &L->tok_embd, 0};
    ws[n++] = (wspec){"output_norm.weight", 1, {C, 1}, &L->out_norm, 0};
    if (!tied) ws[n++] = (wspec){"output.weight", 2, {C, V}, &L->output, 0};
    for (int l = 0; l < L->cfg.n_layer; l++) {
        llama_layer *ly = &L->layers[l];
        struct {
            const char *name;
            int on, nd;
            int64_t ne0, ne1;
            float **dst;
            int perm;
        } t[16] = {
            {"attn_norm.weight", 1, 1, C, 1, &ly->attn_norm, 0},
            {"attn_q.weight", 1, 2, C, (int64_t)H * d, &ly->wq, perm ? H : 0},
            {"attn_q.bias", c->qkv_bias, 1, (int64_t)H * d, 1, &ly->bq, 0},
            {"attn_k.weight", 1, 2, C, (int64_t)G * d, &ly->wk, perm ? G : 0},
            {"attn_k.bias", c->qkv_bias, 1, (int64_t)G * d, 1, &ly->bk, 0},
            {"attn_v.weight", 1, 2, C, (int64_t)G * d, &ly->wv, 0},
            {"attn_v.bias", c->qkv_bias, 1, (int64_t)G * d, 1, &ly->bv, 0},
            {"attn_output.weight", 1, 2, (int64_t)H * d, C, &ly->wo, 0},
            {"post_attention_norm.weight", c->gemma, 1, C, 1, &ly->post_attn_norm, 0},
            {"ffn_norm.weight", 1, 1, C, 1, &ly->ffn_norm, 0},
            {"post_ffw_norm.weight", c->gemma, 1, C, 1, &ly->post_ffn_norm, 0},
            {"ffn_gate.weight", 1, 2, C, F, &ly->w_gate, 0},
            {"ffn_up.weight", 1, 2, C, F, &ly->w_up, 0},
            {"ffn_down.weight", 1, 2, F, C, &ly->w_down, 0},
        };
        for (int i = 0; i < 16; i++) {
            if (!t[i].on) continue;
            wspec *w = &ws[n++];
            snprintf(w->name, sizeof w->name, "blk.%d.%s", l, t[i].name);
            w->n_dims = t[i].nd;
            w->ne[0] = t[i].ne0;
            w->ne[1] = t[i].ne1;
            w->dst = t[i].dst;
            w->permute_heads = t[i].perm;
        }
        ly->window = al__llama_layer_window(c, l);
    }
    /* check everything (cheap) before allocating the float32 arena */
    int rc = 0;
    size_t total = 0, each;
    for (int i = 0; i < n && !rc; i++) {
        rc = check_spec(g, &ws[i], err);
        if (!rc && (!al__mul_ok((size_t)ws[i].ne[0], (size_t)(ws[i].n_dims > 1 ? ws[i].ne[1] : 1),
                                &each) ||
                    !al__add_ok(total, each, &total)))
            rc = al__err(err, AL_E_NOMEM, "%s: the weights' size overflows", g->name);
    }
    if (!rc && !al__mul_ok(total, sizeof(float), &each))
        rc = al__err(err, AL_E_NOMEM, "%s: too large", g->name);
    if (!rc && !(L->arena = al__malloc_aligned(each, "llama weights (float32)", err)))
        rc = AL_E_NOMEM;
    float *p = L->arena;
    for (int i = 0; i < n && !rc; i++) {
        const wspec *w = &ws[i];
        int64_t ne[2] = {w->ne[0], w->n_dims > 1 ? w->ne[1] : 1};
        rc = al__gguf_load_f32(g, w->name, w->n_dims, ne, p, err);
        if (!rc) al__model_scan_nonfinite(m, g->name, w->name, p, (size_t)(ne[0] * ne[1]));
        if (!rc && w->permute_heads) rc = unpermute_qk(p, w->permute_heads, d, C, err);
        *w->dst = p;
        p += ne[0] * ne[1];
    }
    if (!rc && tied) L->output = L->tok_embd;
    free(ws);
    return rc;
}

void al__llama_free(llama *L) {
    if (!L) return;
    free(L->arena);
    free(L->rope_freqs);
    free(L->layers);
    al__attn_ws_free(&L->ws);
    al__gguf_close(L->gguf);
    free(L);
}

/* ---- forward -------------------------------------------------------------------------------- */

/* Activations of one forward, [T, ...] each. */
typedef struct acts {
    float *x;    /* [T, C] residual stream */
    float *emb;  /* [T, C] model input (only when the capture wants it) */
    float *h;    /* [T, C] normed input */
    float *q;    /* [T, H*d] */
    float *k;    /* [T, G*d] */
    float *v;    /* [T, G*d] */
    float *att;  /* [T, H*d] head outputs */
    float *tmp;  /* [T, C] */
    float *gate; /* [T, F] */
    float *up;   /* [T, F] */
    float *rope; /* [T, d/2, 2] */
} acts;

static void free_acts(acts *a) {
    float *all[] = {a->x, a->emb, a->h, a->q, a->k, a->v, a->att, a->tmp, a->gate, a->up, a->rope};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

static int build_acts(acts *a, const llama *L, int T, int want_emb, al_error *err) {
    memset(a, 0, sizeof *a);
    const al__llama_config *c = &L->cfg;
    size_t t = (size_t)T, C = (size_t)c->d_model, Hd = (size_t)c->n_head * c->d_head,
           Gd = (size_t)c->n_kv_head * c->d_head, F = (size_t)c->d_ff;
    a->x = al__malloc_aligned(t * C * 4, "activations", err);
    a->h = al__malloc_aligned(t * C * 4, "activations", err);
    a->tmp = al__malloc_aligned(t * C * 4, "activations", err);
    a->q = al__malloc_aligned(t * Hd * 4, "activations", err);
    a->att = al__malloc_aligned(t * Hd * 4, "activations", err);
    a->k = al__malloc_aligned(t * Gd * 4, "activations", err);
    a->v = al__malloc_aligned(t * Gd * 4, "activations", err);
    a->gate = al__malloc_aligned(t * F * 4, "activations", err);
    a->up = al__malloc_aligned(t * F * 4, "activations", err);
    a->rope = al__malloc(t * (size_t)c->d_head * 4, "RoPE table", err);
    a->emb = want_emb ? al__malloc_aligned(t * C * 4, "activations", err) : NULL;
    if (!a->x || !a->h || !a->tmp || !a->q || !a->att || !a->k || !a->v || !a->gate || !a->up ||
        !a->rope || (want_emb && !a->emb)) {
        free_acts(a);
        return AL_E_NOMEM;
    }
    return 0;
}

/* One layer's attention block: x += o_proj(attention(rope(q), rope(k), v)). */
/* One layer's attention block: x += attn(rmsnorm(x)) on the rows [r0, T) (the keys and values
 * of every row). */
static int attn_block(llama *L, const llama_layer *ly, int l, acts *a, int T, int r0,
                      const al_capture_request *req, const al_attn_variant *mod, al_error *err) {
    const al__llama_config *c = &L->cfg;
    int C = c->d_model, H = c->n_head, G = c->n_kv_head, d = c->d_head;
    al__rmsnorm(a->h, a->x, ly->attn_norm, T, C, (float)c->eps);
    al__matmul_nt(a->q, a->h, ly->wq, ly->bq, T, C, H * d);
    al__matmul_nt(a->k, a->h, ly->wk, ly->bk, T, C, G * d);
    al__matmul_nt(a->v, a->h, ly->wv, ly->bv, T, C, G * d);
    al__rope_apply(a->q, a->rope, T, H, d, c->rope.dim);
    al__rope_apply(a->k, a->rope, T, G, d, c->rope.dim);
    al__attn at = {
        .layer = l,
        .T = T,
        .n_head = H,
        .n_kv_head = G,
        .d_head = d,
        .d_model = C,
        .causal = 1,
        .window = ly->window,
        .scale = (float)c->attn_scale,
        .softcap = (float)c->attn_softcap,
        .q = a->q,
        .q_stride = (size_t)H * d,
        .k = a->k,
        .k_stride = (size_t)G * d,
        .v = a->v,
        .v_stride = (size_t)G * d,
        .out = a->att,
        .hidden = a->h,
        .embed = a->emb,
        .residual = a->x, /* the layer input, before attn_norm */
        .req = req,
        .mod = mod, /* the attention variant of the run (attn_variant.c) */
        .row0 = r0,
    };
    int rc = al__attention_ws(&at, &L->ws, err);
    if (rc) return rc;
    int M = T - r0; /* rows [r0, T) */
    al__matmul_nt(a->tmp, a->att + (size_t)r0 * H * d, ly->wo, ly->bo, M, H * d, C);
    if (ly->post_attn_norm) al__rmsnorm(a->tmp, a->tmp, ly->post_attn_norm, M, C, (float)c->eps);
    al__add(a->x + (size_t)r0 * C, a->tmp, (size_t)M * C);
    return 0;
}

/* One layer's MLP block: x += down(silu(gate(h)) * up(h)), h = rmsnorm(x), on the T rows of
 * x (the caller offsets x to the rows wanted). */
static void mlp_block(const llama *L, const llama_layer *ly, acts *a, float *x, int T) {
    const al__llama_config *c = &L->cfg;
    int C = c->d_model, F = c->d_ff;
    al__rmsnorm(a->h, x, ly->ffn_norm, T, C, (float)c->eps);
    al__matmul_nt(a->gate, a->h, ly->w_gate, ly->b_gate, T, C, F);
    al__matmul_nt(a->up, a->h, ly->w_up, ly->b_up, T, C, F);
    if (c->gelu) { /* GeGLU */
        if (c->gelu == 1)
            al__gelu_tanh(a->gate, (size_t)T * F);
        else
            al__gelu_erf(a->gate, (size_t)T * F);
        for (size_t i = 0; i < (size_t)T * F; i++) a->gate[i] *= a->up[i];
    } else {
        al__silu_mul(a->gate, a->up, (size_t)T * F);
    }
    al__matmul_nt(a->tmp, a->gate, ly->w_down, ly->b_down, T, F, C);
    if (ly->post_ffn_norm) al__rmsnorm(a->tmp, a->tmp, ly->post_ffn_norm, T, C, (float)c->eps);
    al__add(x, a->tmp, (size_t)T * C);
}

int al__llama_forward(al_model *m, const int32_t *tokens, int T, const al_capture_request *req,
                      const al__fwd *f, float *logits, float *final_hidden, al_error *err) {
    llama *L = m->impl;
    const al__llama_config *c = &L->cfg;
    int C = c->d_model, cap = req && req->what && req->fn, last = f->last, r0 = f->row0;
    acts a;
    int rc = build_acts(&a, L, T, cap && (req->what & AL_CAP_EMBED), err);
    if (rc) return rc;
    for (int t = 0; t < T; t++)
        memcpy(a.x + (size_t)t * C, L->tok_embd + (size_t)tokens[t] * C, (size_t)C * sizeof(float));
    if (c->embed_scale > 0)
        for (size_t i = 0; i < (size_t)T * C; i++) a.x[i] *= (float)c->embed_scale;
    if (a.emb) memcpy(a.emb, a.x, (size_t)T * C * sizeof(float));
    al__rope_table(a.rope, T, &c->rope);
    for (int l = 0; l <= last && !rc; l++) {
        int lr0 = al__fwd_row0(f, l, c->n_layer);
        if ((rc = attn_block(L, &L->layers[l], l, &a, T, lr0, cap ? req : NULL, al__model_attn(m),
                             err)))
            break;
        mlp_block(L, &L->layers[l], &a, a.x + (size_t)lr0 * C, T - lr0);
    }
    int M = T - r0; /* the output rows [r0, T) */
    if (!rc && (logits || final_hidden)) {
        al__rmsnorm(a.h, a.x + (size_t)r0 * C, L->out_norm, M, C, (float)c->eps);
        if (final_hidden) memcpy(final_hidden, a.h, (size_t)M * C * sizeof(float));
        if (logits) al__matmul_nt(logits, a.h, L->output, NULL, M, C, c->vocab);
        if (logits && c->final_softcap > 0) {
            float s = (float)c->final_softcap;
            for (size_t i = 0; i < (size_t)M * c->vocab; i++) logits[i] = s * tanhf(logits[i] / s);
        }
    }
    free_acts(&a);
    return rc;
}

/* ---- the family's vtable and opener ---------------------------------------------------------- */

static void llama_destroy(al_model *m) {
    al__llama_free(m->impl);
    m->impl = NULL;
}

static int llama_tokenizer_any(al_model *m, al_tokenizer **out, al_error *err) {
    llama *L = m->impl;
    if (L->gguf) return al__gguf_tokenizer(L->gguf, L->cfg.vocab, out, err);
    return al__hf_tokenizer_open(L->dir, out, err);
}

/* A GGUF file is the whole model: weights, config and tokenizer (its metadata); an HF
 * directory is config.json + the safetensors, its tokenizer tokenizer.json (+ config). */
static int llama_files(al_model *m, al__model_files *fs, al_error *err) {
    if (((llama *)m->impl)->gguf) return al__model_files_add(fs, m->info.path, "weights", err);
    return al__model_files_safetensors(m, fs, err);
}
static int llama_tokenizer_files(al_model *m, al__model_files *fs, al_error *err) {
    if (((llama *)m->impl)->gguf) return al__model_files_add(fs, m->info.path, "tokenizer", err);
    return al__hf_tokenizer_files(m, fs, err);
}

static int llama_layer_window(const al_model *m, int layer) {
    return ((const llama *)m->impl)->layers[layer].window;
}

static cJSON *llama_architecture(const al_model *m) {
    const llama *L = m->impl;
    const al__llama_config *c = &L->cfg;
    cJSON *o = al__arch_json(c->arch, c->n_head, c->n_kv_head, &c->rope, c->d_head);
    cJSON *w = cJSON_AddArrayToObject(o, "window_of_layer"); /* 0 = global */
    for (int l = 0; l < c->n_layer; l++)
        cJSON_AddItemToArray(w, cJSON_CreateNumber(L->layers[l].window));
    cJSON_AddStringToObject(o, "window_means",
                            "row t sees keys max(0, t - window + 1)..t: METHOD's n = "
                            "min(t + 1, window); 0 = the whole causal prefix");
    if (c->max_window_layers >= 0) {
        cJSON_AddNumberToObject(o, "max_window_layers", c->max_window_layers);
        cJSON_AddStringToObject(o, "max_window_layers_means",
                                "layers below it attend globally, the others through the "
                                "window (current transformers' layer_types; 4.46.3's eager "
                                "forward windowed every layer)");
    }
    cJSON_AddNumberToObject(o, "logit_scale",
                            c->attn_scale > 0 ? c->attn_scale : 1.0 / sqrt((double)c->d_head));
    if (c->attn_softcap > 0) cJSON_AddNumberToObject(o, "attn_logit_softcap", c->attn_softcap);
    if (c->final_softcap > 0) cJSON_AddNumberToObject(o, "final_logit_softcap", c->final_softcap);
    cJSON_AddStringToObject(o, "norm", c->gemma ? "rmsnorm (1 + w), pre and post" : "rmsnorm");
    cJSON_AddStringToObject(o, "mlp", c->gelu ? "geglu" : "swiglu");
    if (c->embed_scale > 0) cJSON_AddNumberToObject(o, "embed_scale", c->embed_scale);
    cJSON_AddBoolToObject(o, "qkv_bias", c->qkv_bias);
    cJSON_AddBoolToObject(o, "tied_embeddings", c->tied);
    return o;
}

static const al_model_vtable llama_vtable = {.forward = al__llama_forward,
                                             .architecture = llama_architecture,
                                             .layer_window = llama_layer_window,
                                             .destroy = llama_destroy,
                                             .tokenizer = llama_tokenizer_any,
                                             .files = llama_files,
                                             .tokenizer_files = llama_tokenizer_files,
                                             .variants = 1};

/* The head counts and sizes every Llama-family config (HF or GGUF) must satisfy. */
int al__llama_check_config(const al__llama_config *c, const char *name, al_error *err) {
    if (c->n_head % c->n_kv_head != 0)
        return al__err(err, AL_E_FORMAT,
                       "%s: %d attention heads are not a multiple of %d key/value heads", name,
                       c->n_head, c->n_kv_head);
    if (c->d_head % 2 != 0 || c->d_head < 2 || c->d_head > 1024)
        return al__err(err, AL_E_FORMAT, "%s: head size %d is not even in [2, 1024]", name,
                       c->d_head);
    if ((int64_t)c->n_head * c->d_head > (1 << 20))
        return al__err(err, AL_E_FORMAT, "%s: %d heads of %d are too large", name, c->n_head,
                       c->d_head);
    return 0;
}

void al__llama_finish(al_model *m, llama *L, const char *name, const char *path, const char *dtype,
                      int64_t n_params) {
    al_model_info *in = &m->info;
    snprintf(in->family, sizeof in->family, "%s", L->cfg.arch);
    snprintf(in->name, sizeof in->name, "%s", name);
    snprintf(in->path, sizeof in->path, "%s", path);
    snprintf(in->dtype, sizeof in->dtype, "%s", dtype);
    for (char *c = in->dtype; *c; c++) *c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
    in->n_layer = L->cfg.n_layer;
    in->n_head = L->cfg.n_head;
    in->n_kv_head = L->cfg.n_kv_head;
    in->d_model = L->cfg.d_model;
    in->d_head = L->cfg.d_head;
    in->d_ff = L->cfg.d_ff;
    in->n_ctx = L->cfg.n_ctx;
    in->vocab_size = L->cfg.vocab;
    in->causal = 1;
    in->n_params = n_params;
    m->vt = &llama_vtable;
    m->impl = L;
}

int al__llama_open_gguf(al_model *m, const char *path, al_error *err) {
    m->impl = NULL;
    llama *L = al__calloc(1, sizeof *L, "llama model", err);
    if (!L) return AL_E_NOMEM;
    int rc = al__gguf_open(path, &L->gguf, err);
    if (!rc) rc = read_hparams(L->gguf, L, err);
    if (!rc) rc = al__llama_check_config(&L->cfg, L->gguf->name, err);
    if (!rc) rc = read_rope_freqs(L->gguf, L, err);
    if (!rc) rc = load_weights(m, L->gguf, L, err);
    if (rc) {
        al__llama_free(L);
        return rc;
    }
    char name[128] = "llama";
    if (al__gguf_find(L->gguf, "general.name"))
        al__gguf_get_str(L->gguf, "general.name", name, sizeof name, NULL);
    const al__gguf_tensor *q = al__gguf_tensor_find(L->gguf, "blk.0.attn_q.weight");
    int64_t n_params = 0;
    for (int64_t i = 0; i < L->gguf->n_tensors; i++) n_params += L->gguf->tensors[i].n_elem;
    al__llama_finish(m, L, name, path, q ? al__ggml_type_name(q->type) : "f32", n_params);
    return 0;
}
