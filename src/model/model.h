/* model.h: the internal interface every model family implements (gpt2.c, llama.c, bert.c,
 * and dump.c, which replays attention dumps).
 * al_model_open (model.c) recognises the file and calls the family's open function, which
 * fills the al_model with its vtable and its private state. */
#ifndef AL_MODEL_H
#define AL_MODEL_H

#include "internal.h"

/* One file a model is made of. */
typedef struct al__model_file {
    char name[256];   /* its base name: what the identity lists */
    char path[4096];  /* as opened */
    const char *role; /* "config", "index", "weights", "tokenizer" */
    int64_t bytes;
    char sha256[65]; /* "" unless hashed */
} al__model_file;

typedef struct al__model_files {
    al__model_file *f; /* [n], sorted by name (bytewise) */
    int n, cap;
    char sha256[65]; /* the identity over the list ("" unless hashed) */
} al__model_files;

/* Appends the file at path (its base name, role, size; an error if it is not a regular file);
 * a path already listed is skipped. */
int al__model_files_add(al__model_files *fs, const char *path, const char *role, al_error *err);
/* The files of an HF safetensors model: config.json, the shard index and every shard it names
 * (or the one .safetensors). */
int al__model_files_safetensors(const al_model *m, al__model_files *fs, al_error *err);
/* The directory of the model: its path when a directory, else the directory holding it. */
void al__model_dir(const al_model *m, char *dir, size_t cap);

/* What one forward computes (al_model_forward_opts works it out from its options and the
 * capture; the families follow it): layers 0..last run (-1: none), and the outputs (final norm,
 * logits and final_hidden) are those of the rows [row0, T) only: logits [T - row0, vocab],
 * final_hidden [T - row0, d_model] (NULL: not wanted; both NULL: no final norm). A causal family
 * may skip, in its last layer, the work that only feeds rows below row0 (the attention's query
 * rows: al__attn.row0, the output projection, the MLP). */
typedef struct al__fwd {
    int last; /* the last layer run */
    int row0; /* 0 (every row) or T - 1 (the last token's) */
} al__fwd;

/* The first query row layer l of n_layer computes: f->row0 in the top layer (nothing above it
 * reads the other rows), 0 below it (every row feeds the next layer's keys and values). */
static inline int al__fwd_row0(const al__fwd *f, int l, int n_layer) {
    return l == n_layer - 1 ? f->row0 : 0;
}

typedef struct al_model_vtable {
    /* Runs the forward (see al_model_forward in attnlim.h) as f says; T already checked
     * 1..n_ctx, f checked against req. */
    int (*forward)(al_model *m, const int32_t *tokens, int T, const al_capture_request *req,
                   const al__fwd *f, float *logits, float *final_hidden, al_error *err);
    void (*destroy)(al_model *m); /* frees impl (not m) */
    /* The model's own tokenizer (GPT-2 BPE files, GGUF metadata, vocab.txt). */
    int (*tokenizer)(al_model *m, al_tokenizer **out, al_error *err);
    /* Optional (NULL for models that run on any tokens): the token sequence the model holds
     * attention for (an attention dump: its tokens are the corpus). *ids [*n] stay owned by m;
     * *known = 0 when the dump records no token ids (then ids are zeros standing for any
     * tokens of that length). */
    int (*tokens)(al_model *m, const int32_t **ids, int *n, int *known, al_error *err);
    /* Optional: would forward(T tokens, req) find everything req asks for (a dump: the layers,
     * heads and arrays it holds)? 0, or an error naming what is missing. Called before long
     * runs so that they fail before writing anything. */
    int (*check)(al_model *m, int T, const al_capture_request *req, al_error *err);
    /* The files that define the model (weights and shapes), each added to fs with
     * al__model_files_add: the family alone knows what it reads (al__model_files_list). */
    int (*files)(al_model *m, al__model_files *fs, al_error *err);
    /* Optional: the files its tokenizer reads, the same way (al__model_tokenizer_files). */
    int (*tokenizer_files)(al_model *m, al__model_files *fs, al_error *err);
    /* Optional: the "dump" object of the manifest's model (al__model_json), or NULL. */
    struct cJSON *(*describe)(const al_model *m);
    /* Optional: the "architecture" object of the manifest's model: the facts of the family
     * that shape attention (window per layer, soft-caps, logit scale, rotary dimensions and
     * fraction, the kv head of each query head, norms, activation), or NULL. */
    struct cJSON *(*architecture)(const al_model *m);
    /* 1: forward passes al__model_attn(m) to every al__attn (.mod): attention variants work */
    int variants;
    /* Optional: layer's causal sliding window (the keys a row sees; 0 = none: NULL) */
    int (*layer_window)(const al_model *m, int layer);
} al_model_vtable;

/* One NaN/Inf warning of a load (al__model_warn_nonfinite). */
typedef struct al__load_warning {
    char file[1024];  /* the file holding the tensor */
    char tensor[256]; /* its name */
    size_t n_bad;     /* non-finite values in it */
    size_t first;     /* flat index of the first */
} al__load_warning;
#define AL__MAX_LOAD_WARNINGS 16

/* The storage format al_model_open recognised (which files define the model follows from it). */
typedef enum { AL__FMT_SAFETENSORS = 1, AL__FMT_LLMC, AL__FMT_GGUF, AL__FMT_DUMP } al__model_format;

struct al_model {
    const al_model_vtable *vt;
    al_model_info info;
    void *impl; /* the family's state: weights, mappings, scratch */
    al__model_format format;
    /* load warnings, kept for manifests: the first AL__MAX_LOAD_WARNINGS, and how many there were
     */
    al__load_warning warnings[AL__MAX_LOAD_WARNINGS];
    int n_warnings, n_warnings_total;
    /* the files that define the model, with their SHA-256, once hashed (al__model_files_list) */
    struct al__model_files *hashed;
    /* the attention variant of every forward (al_model_set_attention, attn_variant.c): attn with
     * its masks owned (attn_layers [n_layer], attn_heads [n_head] or NULL); attn_on = 0: dense */
    al_attn_variant attn;
    uint8_t *attn_layers, *attn_heads;
    int attn_on;
    /* the model's own attention when it is not softmax: the normalizer `attnlim train` trained it
     * with (config.json's attnlim_normalizer, set by the GPT-2 loader), no masks. al__attn_clear
     * restores it, so "the model's own attention" runs it; own_on = 0: softmax */
    al_attn_variant own;
    int own_on;
    /* own_s [n_layer * n_head]: the trained ssmax s of every (layer, head) when they differ (a
     * learnt s, attnlim train --ssmax-learn), or NULL; applied while attn_is_own (the variant in
     * force is the model's own, not one a caller set) */
    float *own_s;
    int attn_is_own;
};

/* The variant a family's forward hands to al__attention (NULL: the model's own attention). */
static inline const al_attn_variant *al__model_attn(const al_model *m) {
    return m->attn_on ? &m->attn : NULL;
}
/* The "attention" object of every manifest: {rule, k (the rule as text), normalizer, layers,
 * heads ("all" or [indices]), tie_rule, modified: bool}. */
struct cJSON *al__attn_json(const al_model *m);
/* "all" (mask NULL) or the array of the indices i < n with mask[i] set */
struct cJSON *al__mask_json(const uint8_t *mask, int n);
/* Frees the masks (al_model_free) and restores the model's own attention. */
void al__attn_clear(al_model *m);
/* Makes nm (every layer and head; any al_norm kind, sa-softmax and a temperature included: the
 * normalizer a checkpoint was trained with) the model's own attention; s_per_head [n_layer *
 * n_head] (malloc'ed, owned by m from here; NULL: nm's one s) the ssmax s of each head. */
void al__attn_set_own(al_model *m, const al_norm *nm, float *s_per_head);
/* 1 when the attention in force is the model's own trained normalizer (not softmax, not a
 * caller's variant), *out then that normalizer of (layer, head) (its own ssmax s); else 0. */
int al__model_own_norm(const al_model *m, int layer, int head, al_norm *out);

/* Family openers call this for a tensor holding NaN/Inf values: prints
 * "attnlim: warning: FILE: tensor NAME has N NaN/Inf values (first at flat index I)" on stderr
 * and keeps the warning in m (al__model_warnings). */
void al__model_warn_nonfinite(al_model *m, const char *file, const char *tensor, size_t n_bad,
                              size_t first);
/* The one NaN/Inf policy for weights: scans the float32 values x[n] (x may be unaligned) of
 * tensor in file and, when some are NaN/Inf, warns as al__model_warn_nonfinite (m may be NULL:
 * printed only). Loading goes on: a NaN that reaches an output is caught where it is written
 * (capture, perplexity, embed fail naming this warning). Returns the count. */
size_t al__model_scan_nonfinite(al_model *m, const char *file, const char *tensor, const void *x,
                                size_t n);
/* The warnings kept (*n of them; *total counts those past the cap too). */
const al__load_warning *al__model_warnings(const al_model *m, int *n, int *total);

/* The files that define the model (weights and shapes; vtable files): for safetensors, config.json,
 * the shard index and every shard it names (or the one .safetensors); for llm.c and GGUF, the file
 * itself (its header is the config). hash != 0 also computes each file's SHA-256 and the model
 * identity: the SHA-256 of the lines "<sha256>  <name>\n" in name order, i.e. what
 * `sha256sum FILES | LC_ALL=C sort -k 2 | sha256sum` prints in the model's directory. */
int al__model_files_list(al_model *m, int hash, al__model_files *out, al_error *err);
/* The files the model's tokenizer reads (vtable tokenizer_files: GPT-2, encoder.json + vocab.bpe
 * (al_data_find); BERT, vocab.txt and tokenizer_config.json when present; GGUF, the model file
 * (its metadata)). The identity sha256 is computed the same way. */
int al__model_tokenizer_files(al_model *m, int hash, al__model_files *out, al_error *err);
void al__model_files_free(al__model_files *f);

/* The manifest object of a model: path (absolute) and path_given, sha256 (the identity above)
 * with sha256_of saying what it covers (hash = 0: neither, and no per-file sha256), files
 * [{name, path, role, bytes, sha256}], family,
 * name, dtype, shape fields, n_params, load_warnings. NULL on error (err set). */
struct cJSON *al__model_json(al_model *m, const char *given, int hash, al_error *err);
/* Layer l's causal sliding window (row t sees keys max(0, t - window + 1)..t; 0 = none). */
int al__model_layer_window(const al_model *m, int layer);
/* The files array of such an object. */
struct cJSON *al__model_files_json(const al__model_files *fs);
/* What a files identity covers (the sha256_of string of every manifest). */
extern const char AL__IDENTITY_OF[];

/* Family openers. path is a file (or an HF directory for gpt2/bert). Each fills m->vt,
 * m->info (everything but sha256) and m->impl; on error leaves m->impl NULL. */
int al__gpt2_open_safetensors(al_model *m, const char *path, al_error *err); /* HF dir or file */
int al__gpt2_open_llmc(al_model *m, const char *path, al_error *err);        /* llm.c .bin */
int al__llama_open_gguf(al_model *m, const char *path, al_error *err);       /* .gguf */
/* Llama, Mistral, Qwen2 from an HF directory (or its .safetensors / index .json). */
int al__llama_open_hf(al_model *m, const char *path, al_error *err);
int al__bert_open_safetensors(al_model *m, const char *path, al_error *err); /* HF dir or file */
/* GPT-NeoX (Pythia) from an HF directory, or a GGUF of architecture gptneox. */
int al__neox_open_hf(al_model *m, const char *path, al_error *err);
int al__neox_open_gguf(al_model *m, const char *path, al_error *err);
/* The tokenizer of a GGUF file from its tokenizer.ggml.* metadata (gguf_tokenizer.c); vocab > 0:
 * the token count the model's embedding has (checked). The fuzz entry point of that metadata. */
struct al__gguf;
int al__gguf_tokenizer(const struct al__gguf *g, int vocab, al_tokenizer **out, al_error *err);

/* An attention dump (docs/dumps.md, src/dump.c): dir holds manifest.json. Validates the
 * manifest and every array it names (shapes, dtypes, finite values) before returning. */
int al__dump_open(al_model *m, const char *dir, al_error *err);
/* Is dir a dump? It holds manifest.json and no config.json, or a manifest.json that declares
 * itself one ("schema": "attnlim.dump/...", or "command": "capture"). */
int al__dump_is_dump_dir(const char *dir);
/* The "dump" object of manifests (schema, T, token ids present, layers, heads, arrays, the
 * manifest's model description); NULL for other models. */
struct cJSON *al__dump_json(const al_model *m);

/* The model's own token sequence (vtable tokens): *n = 0 when the model has none (it runs on
 * any tokens). */
int al__model_own_tokens(al_model *m, const int32_t **ids, int *n, int *known, al_error *err);
/* vtable check, or 0 for models without one. */
int al__model_check(al_model *m, int T, const al_capture_request *req, al_error *err);

#endif
