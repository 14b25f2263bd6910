/* attnlim.h: the public API of attnlim, a toolkit that measures the limits of
 * normalization in attention (Mudarisov, Burtsev, Petrova, State; arXiv 2508.17821).
 *
 * Conventions (every function of this header):
 *  - Prefix al_. Opaque contexts own their memory: al_x_open/al_x_free pairs.
 *  - Errors are values: functions return 0 on success or an al_code, and fill the
 *    al_error given (which may be NULL) with a message naming the file and the fault.
 *  - Shapes are written beside every array argument, row-major, as [rows, cols].
 *  - Float accumulations are in double. No globals; every function is re-entrant.
 *  - Definitions follow docs/METHOD.md (a copy of the project's spec). Where the spec says
 *    [reading], the result is our reconstruction of a formula the paper does not print.
 */
#ifndef ATTNLIM_H
#define ATTNLIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==== Version and errors ================================================================= */

const char *al_version(void); /* "0.1.0" */

typedef enum al_code {
    AL_OK = 0,
    AL_E_INVALID = 1,     /* bad argument or option */
    AL_E_IO = 2,          /* a file could not be opened, read or written */
    AL_E_FORMAT = 3,      /* a file is malformed (names the file and the fault) */
    AL_E_NOMEM = 4,       /* out of memory, or a size that would overflow */
    AL_E_RANGE = 5,       /* NaN/Inf or a value out of its domain (names the position) */
    AL_E_UNSUPPORTED = 6, /* a valid input we do not support (names what) */
    AL_E_NOTFOUND = 7,    /* a data file, tensor or model that is not there */
    AL_E_CANCELLED = 8,   /* stopped by an observer or a signal */
} al_code;

typedef struct al_error {
    al_code code;
    char msg[1024];
} al_error;

const char *al_code_name(al_code code); /* "invalid argument", "format error", ... */

/* ==== Arrays and NumPy .npy files ========================================================= */

#define AL_MAX_DIMS 8

typedef enum al_dtype { AL_F32 = 0, AL_F64 = 1 } al_dtype;

/* An owned, C-ordered, dense array. data is malloc'ed; al_array_free releases it. */
typedef struct al_array {
    al_dtype dtype;
    int ndim;                     /* 0..AL_MAX_DIMS */
    int64_t shape[AL_MAX_DIMS];
    void *data;                   /* [shape[0], ..., shape[ndim-1]] */
} al_array;

int64_t al_array_numel(const al_array *a);
size_t al_dtype_size(al_dtype dt);
int al_array_alloc(al_array *a, al_dtype dt, int ndim, const int64_t *shape, al_error *err);
void al_array_free(al_array *a);
/* A new float64 copy of a (any dtype), in *out (allocated). */
int al_array_to_f64(const al_array *a, al_array *out, al_error *err);

/* Reads .npy v1/v2/v3 with dtype <f4 or <f8 (also |f4-style native LE), C order, any rank.
 * The header is untrusted: magic, version, length, dict syntax, shape overflow and the
 * data size are all checked. name is used in messages (the file path). */
int al_npy_read(const char *path, al_array *out, al_error *err);
int al_npy_parse(const void *buf, size_t len, const char *name, al_array *out, al_error *err);
/* Writes v1 (v2 if the header needs it), atomically (temp file, fsync, rename). */
int al_npy_write(const char *path, const al_array *a, al_error *err);

/* Numbers from text (untrusted): whitespace- or comma-separated, one row per non-empty line.
 * One line gives a 1-D float64 array, several lines of equal length a 2-D one. NaN/Inf and
 * non-numbers are errors naming the line and the value; name is used in messages. */
int al_parse_numbers(const char *text, size_t len, const char *name, al_array *out, al_error *err);

/* ==== Data files (tokenizer, corpus) ====================================================== */

/* Finds a shared data file by its relative path ("gpt2/encoder.json",
 * "gpt2/vocab.bpe", "war_and_peace/pg2600.txt"), in this order:
 *   1. explicit (a directory holding relpath, or the file itself), when not NULL;
 *   2. $ATTNLIM_DATA (a directory holding relpath);
 *   3. the cache: $ATTNLIM_CACHE, else $XDG_CACHE_HOME/attnlim, else ~/.cache/attnlim;
 *   4. ../shared/data (from the working directory, then from the source tree; or
 *      $ATTNLIM_SHARED_DIR when set);
 *   5. a download into the cache (curl or wget), checked against the pinned SHA-256.
 * Every file found is checked against its pinned SHA-256 (a mismatch is an error naming
 * the file, unless $ATTNLIM_NO_VERIFY=1). out receives the path. */
int al_data_find(const char *relpath, const char *explicit_path, char *out, size_t out_size,
                 al_error *err);
/* The cache directory (created if absent) into out. */
int al_cache_dir(char *out, size_t out_size, al_error *err);

/* SHA-256 of a file / a buffer as 64 lowercase hex digits + NUL. */
int al_sha256_file(const char *path, char hex[65], al_error *err);
void al_sha256_buf(const void *buf, size_t len, char hex[65]);

/* ==== Section: normalizers (METHOD section 7) ============================================ */
/* owner: normalizers module (src/normalize.c) */

/* ==== Section: metrics (METHOD sections 2-6) ============================================== */
/* owner: metrics module (src/metrics.c, src/sensitivity.c) */

/* ==== Section: statistics (METHOD section 4) ============================================= */
/* owner: statistics module (src/stats.c) */

/* ==== Section: tokenizers and corpora ===================================================== */
/* owner: tokenizer module (src/bpe.c, src/corpus.c, src/wordpiece.c) */

typedef struct al_tokenizer al_tokenizer;

/* GPT-2 byte-level BPE. vocab: NULL (find gpt2/encoder.json and gpt2/vocab.bpe with
 * al_data_find), or a directory holding encoder.json + vocab.bpe (or HF vocab.json +
 * merges.txt). */
int al_tokenizer_open_gpt2(const char *vocab, al_tokenizer **out, al_error *err);
void al_tokenizer_free(al_tokenizer *tk);
int al_tokenizer_vocab_size(const al_tokenizer *tk);
/* Encodes bytes (any bytes: invalid UTF-8 is handled byte-level, as GPT-2 does) into ids
 * (*ids malloc'ed). allow_special: recognise special tokens such as <|endoftext|> in text. */
int al_tokenize(const al_tokenizer *tk, const char *text, size_t len, int allow_special, int32_t **ids,
                size_t *n, al_error *err);
/* Decodes ids into bytes (*text malloc'ed, NUL-terminated, len excludes the NUL). */
int al_detokenize(const al_tokenizer *tk, const int32_t *ids, size_t n, char **text, size_t *len,
                  al_error *err);
/* A corpus: "war-and-peace" (METHOD section 1: the body of pg2600.txt, CRLF -> LF; data_path
 * as al_data_find's explicit path) or a path to a text file (read as bytes). */
int al_corpus_load(const char *name_or_path, const char *data_path, char **text, size_t *len, al_error *err);

/* ==== Section: models and capture ========================================================= */
/* owner: model modules (src/model.c dispatches; src/gpt2.c, src/llama.c, src/bert.c) */

typedef struct al_model al_model;

typedef struct al_model_info {
    char family[16];   /* "gpt2", "llama", "bert" */
    char name[128];    /* e.g. "gpt2-124M-shape", "SmolLM2-135M-Instruct" */
    char path[1024];   /* the file opened */
    char sha256[65];   /* of that file ("" until computed by al_model_hash) */
    char dtype[16];    /* storage of the weights: "f32", "bf16", "q4_1", ... */
    int n_layer;
    int n_head;        /* query heads */
    int n_kv_head;     /* key/value heads (== n_head without grouped-query attention) */
    int d_model;
    int d_head;
    int d_ff;
    int n_ctx;         /* the longest window the model takes */
    int vocab_size;
    int causal;        /* 1 decoder (n = t+1 keys for row t), 0 encoder (n = L) */
    int64_t n_params;
} al_model_info;

/* Opens a model: a path (HF directory or .safetensors with config.json beside it; llm.c
 * .bin; .gguf) or a known name ("smollm2", "minilm", "gpt2" from the cache; fetched on
 * first use where the project can fetch it). The file is untrusted: every size, offset,
 * shape and dtype is checked. */
int al_model_open(const char *path_or_name, al_model **out, al_error *err);
void al_model_free(al_model *m);
const al_model_info *al_model_get_info(const al_model *m);
/* The model's own tokenizer (GPT-2 BPE files, GGUF metadata, BERT vocab.txt). */
int al_model_tokenizer(al_model *m, al_tokenizer **out, al_error *err);
/* Computes (once) and returns the SHA-256 of the model file into info->sha256. */
int al_model_hash(al_model *m, al_error *err);

/* What a capture wants (bit flags). */
enum {
    AL_CAP_Q = 1u << 0,       /* q [n_sel, T, d_head] (after RoPE where the model has it) */
    AL_CAP_K = 1u << 1,       /* k [n_sel, T, d_head] of the key/value head each query head reads */
    AL_CAP_V = 1u << 2,       /* v [n_sel, T, d_head] likewise */
    AL_CAP_LOGITS = 1u << 3,  /* z [n_sel, T, T] = q.k/sqrt(d_head); masked entries -INFINITY */
    AL_CAP_WEIGHTS = 1u << 4, /* alpha [n_sel, T, T] = softmax rows; masked entries 0 */
    AL_CAP_HIDDEN = 1u << 5,  /* [T, d_model] the layer input after its first norm */
    AL_CAP_EMBED = 1u << 6,   /* [T, d_model] the model input (token + position embedding) */
};

/* One layer's capture, handed to the observer while the forward runs. Pointers are valid
 * only during the call; copy what must be kept. Arrays of heads hold the selected heads in
 * increasing order (heads[0..n_sel-1]). */
typedef struct al_capture {
    int layer;
    int T;             /* tokens in the window */
    int n_head, n_kv_head, d_head, d_model;
    int causal;
    int n_sel;
    const int *heads;   /* [n_sel] query head indices */
    const int *kv_head; /* [n_head] key/value head read by each query head */
    const float *q;       /* [n_sel, T, d_head] or NULL */
    const float *k;       /* [n_sel, T, d_head] or NULL */
    const float *v;       /* [n_sel, T, d_head] or NULL */
    const float *logits;  /* [n_sel, T, T] or NULL */
    const float *weights; /* [n_sel, T, T] or NULL */
    const float *hidden;  /* [T, d_model] or NULL */
    const float *embed;   /* [T, d_model] or NULL */
} al_capture;

/* Returns 0 to go on, non-zero (with err set) to stop the forward. */
typedef int (*al_observer)(void *user, const al_capture *cap, al_error *err);

typedef struct al_capture_request {
    unsigned what;           /* AL_CAP_* flags; 0 = no capture */
    const uint8_t *layers;   /* [n_layer] non-zero = wanted; NULL = all layers */
    const uint8_t *heads;    /* [n_head] non-zero = wanted; NULL = all heads */
    al_observer fn;
    void *user;
} al_capture_request;

/* Runs the model over tokens [T] (T <= n_ctx). logits [T, vocab_size] and final_hidden
 * [T, d_model] (after the final norm for decoders, the last layer's output for encoders)
 * are written when not NULL. req may be NULL. Memory: only one layer's capture is alive. */
int al_model_forward(al_model *m, const int32_t *tokens, int T, const al_capture_request *req,
                     float *logits, float *final_hidden, al_error *err);

/* ---- Part: checkpoints (owner: checkpoint module: src/gpt2_load.c, src/verify.c,
 * src/makemodel.c) ---- */

/* A GPT-2 parameter of an open model, copied as float32 in the HF layout (Conv1D [in, out];
 * wte [vocab_size, d_model] without llm.c's padding rows), whatever the file's format and
 * dtype. name: an HF parameter name, with or without "transformer." ("h.0.attn.c_attn.weight"). */
int al_gpt2_tensor(const al_model *m, const char *name, al_array *out, al_error *err);

typedef enum al_verify_status {
    AL_VERIFY_MATCH = 0,      /* present, same bytes as the pinned hash */
    AL_VERIFY_MISMATCH = 1,   /* present, different bytes (or size) */
    AL_VERIFY_MISSING = 2,    /* a parameter of the table absent from the file */
    AL_VERIFY_UNEXPECTED = 3, /* in the file, not in the table */
    AL_VERIFY_OPTIONAL = 4,   /* an HF buffer or the tied lm_head, absent: not needed */
} al_verify_status;

typedef struct al_verify_entry {
    char name[160];         /* the table's name (HF, "transformer." prefix), or the file's */
    al_verify_status status;
    int64_t bytes;          /* float32 bytes hashed, -1 if absent */
    int64_t expected_bytes; /* from the table, -1 if not in it */
    char sha256[65];        /* of the tensor as HF float32 little-endian, "" if absent */
    char expected[65];      /* "" if not in the table */
    char note[128];         /* e.g. "stored as bf16: cannot match the float32 hash" */
} al_verify_entry;

typedef struct al_verify_report {
    int n;
    al_verify_entry *entries; /* [n], table order, then the unexpected ones */
    int matched, mismatched, missing, unexpected, optional_absent;
    int complete;             /* 1: every parameter of the table present and matched */
    char format[32];          /* "safetensors", "llm.c v3 (fp32)", "llm.c v5 (bf16)" */
    char table[1024];         /* the table used */
} al_verify_report;

/* Hashes every tensor of a GPT-2 checkpoint (a bare .safetensors, an HF directory or index,
 * or an llm.c .bin; no config needed) in the HF float32 layout and compares them with a
 * table of "name<TAB>bytes<TAB>sha256" lines. table NULL: the pinned GPT-2 124M table
 * (data/gpt2_124M_tensor_sha256.tsv in the source tree or share/attnlim when installed). */
int al_gpt2_verify(const char *model_path, const char *table, al_verify_report *out, al_error *err);
void al_verify_report_free(al_verify_report *r);

typedef enum al_ckpt_format { AL_CKPT_SAFETENSORS = 0, AL_CKPT_LLMC = 1 } al_ckpt_format;

typedef struct al_gpt2_make_opts {
    int n_layer, n_head, n_embd, n_ctx, vocab_size;
    uint64_t seed;
    al_ckpt_format format;
    int llmc_version; /* 3 (fp32) or 5 (bf16) */
} al_gpt2_make_opts;

/* Writes a deterministic random GPT-2 checkpoint of the real layout, atomically: safetensors
 * (out = a directory receiving model.safetensors + config.json, HF names without prefix) or
 * llm.c (out = the .bin, vocabulary padded to a multiple of 128). The same seed gives the
 * same weights in both formats. Scales: embeddings and matrices N(0, 0.02) except c_attn
 * N(0, 1/sqrt(C)) (so that attention logits have unit scale), residual projections
 * N(0, 0.02/sqrt(2L)), biases N(0, 0.02), LayerNorm weights 1 + N(0, 0.1). */
int al_gpt2_make_model(const al_gpt2_make_opts *o, const char *out, al_error *err);

/* ==== Section: experiments (the paper's Algorithms 1-5, reports) ======================== */
/* owner: reproduce module (src/reproduce.c, src/plot.c, src/report.c) */

#ifdef __cplusplus
}
#endif
#endif /* ATTNLIM_H */
