/* tokenizer.h: the internal side of al_tokenizer (owner: tokenizer module, src/bpe.c and
 * src/tokenizer.c; WordPiece in src/wordpiece.c by the BERT module). */
#ifndef AL_TOKENIZER_H
#define AL_TOKENIZER_H

#include "internal.h"

/* Byte-level BPE engine, built from in-memory vocabulary and merges so that GPT-2 files
 * (encoder.json + vocab.bpe, or vocab.json + merges.txt) and GGUF metadata
 * (tokenizer.ggml.tokens, tokenizer.ggml.merges) share one implementation. */
typedef struct al__bpe al__bpe;
typedef enum { AL_PRE_GPT2 = 0, AL_PRE_LLAMA3 = 1, AL_PRE_SMOLLM = 2 } al__pretok;
/* tokens[n_tokens]: token strings in GPT-2's byte-to-unicode alphabet, id = index.
 * merges[n_merges]: "left right" strings, rank = index. specials: ids of special tokens
 * (e.g. <|endoftext|>) matched literally in text when allowed. */
int al__bpe_create(const char *const *tokens, int n_tokens, const char *const *merges, int n_merges,
                   al__pretok pre, al__bpe **out, al_error *err);
int al__bpe_add_special(al__bpe *b, const char *text, int id, al_error *err);
/* As al__bpe_create, with the source line of each merge (merge_lines[n_merges], may be NULL)
 * and the merges file's name, so that errors name the file and the line. */
int al__bpe_create_lines(const char *const *tokens, int n_tokens, const char *const *merges,
                         int n_merges, const int *merge_lines, const char *merges_name,
                         al__pretok pre, al__bpe **out, al_error *err);
/* The general form (tokenizer.json): splits[n_splits] PCRE2 patterns (UTF, UCP) applied in
 * sequence, each splitting the pieces of the one before into its matches and the gaps between
 * them (none: a segment is one piece); raw_tokens: token strings are raw UTF-8 and the initial
 * symbols of a piece are its characters (SentencePiece-style BPE), with byte_fallback to the
 * <0xXX> tokens, else unk_id (-1: dropped), fused when fuse_unk; ignore_merges: a piece that is
 * a whole token is that token. pre is kept for the record only. */
#define AL__BPE_MAX_SPLITS 8
typedef struct al__bpe_opts {
    al__pretok pre;
    const char *const *splits;
    int n_splits;
    int raw_tokens, byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;
    /* [n_tokens] or NULL: without merges, SentencePiece's rule (GGUF "llama" vocabularies):
     * every split of a token into two tokens is a merge, ranked by the merged token's score
     * (highest first), as transformers' SentencePiece/GGUF converters order them */
    const float *scores;
} al__bpe_opts;
int al__bpe_create_opts(const char *const *tokens, int n_tokens, const char *const *merges,
                        int n_merges, const int *merge_lines, const char *merges_name,
                        const al__bpe_opts *o, al__bpe **out, al_error *err);
int al__bpe_encode(const al__bpe *b, const char *text, size_t len, int allow_special, int32_t **ids,
                   size_t *n, al_error *err);
int al__bpe_decode(const al__bpe *b, const int32_t *ids, size_t n, char **text, size_t *len,
                   al_error *err);
int al__bpe_vocab_size(const al__bpe *b);
/* The length of the longest valid UTF-8 prefix of s[n]. */
size_t al__utf8_valid_len(const unsigned char *s, size_t n);
void al__bpe_free(al__bpe *b);

/* WordPiece (BERT): vocab.txt lines; lower-casing and accent stripping per the config. */
typedef struct al__wordpiece al__wordpiece;
int al__wordpiece_open(const char *vocab_txt, int lowercase, int strip_accents, al__wordpiece **out,
                       al_error *err);
void al__wordpiece_free(al__wordpiece *w);
int al__wordpiece_vocab_size(const al__wordpiece *w); /* ids 0..n-1 */
/* Encodes text into ids with [CLS] ... [SEP] around it; *ids malloc'ed. */
int al__wordpiece_encode(const al__wordpiece *w, const char *text, size_t len, int32_t **ids,
                         size_t *n, al_error *err);
/* The ids of [CLS] and [SEP]. */
void al__wordpiece_cls_sep(const al__wordpiece *w, int32_t *cls, int32_t *sep);
int al__wordpiece_decode(const al__wordpiece *w, const int32_t *ids, size_t n, char **text,
                         size_t *len, al_error *err);

/* The tokenizer of an HF model directory: dir/tokenizer.json (the HF `tokenizers` format),
 * with BOS/EOS from dir/tokenizer_config.json when present (src/text/hf_tokenizer.c). */
int al__hf_tokenizer_open(const char *dir, al_tokenizer **out, al_error *err);

/* The tokenizer.json pipeline (hf_tokenizer.c) over the BPE engine. parse: the fuzz entry
 * point (text[len] of a tokenizer.json; name for messages). */
typedef struct al__hftok al__hftok;
int al__hftok_parse(const char *text, size_t len, const char *name, al__hftok **out, al_error *err);
int al__hftok_encode(const al__hftok *t, const char *text, size_t len, int allow_special,
                     int32_t **ids, size_t *n, al_error *err);
int al__hftok_decode(const al__hftok *t, const int32_t *ids, size_t n, char **text, size_t *len,
                     al_error *err);
int al__hftok_vocab_size(const al__hftok *t);
/* The BOS id (-1 none), whether the files add it (dflt) and which file says so. */
void al__hftok_bos(const al__hftok *t, int32_t *id, int *dflt, const char **from);
/* Overrides BOS/EOS adding (1 on, 0 off, -1 keep; on only where the file names the token). */
void al__hftok_set_bos_eos(al__hftok *t, int add_bos, int add_eos);
void al__hftok_free(al__hftok *t);
int al__tokenizer_from_hf(al__hftok *t, al_tokenizer **out, al_error *err);
/* A tokenizer pipeline given field by field: GGUF metadata (src/model/gguf_tokenizer.c reads
 * it). model "llama": SentencePiece-style BPE (raw tokens, scores, byte fallback, ▁ for spaces,
 * add_space_prefix); model "gpt2": byte-level BPE with merges and the pre-tokenizer pre, whose
 * Split patterns are those of the HF tokenizer.json files of the family (one table,
 * hf_tokenizer.c). types: GGUF token types (2 unknown, 3 control, 4 user-defined become
 * added tokens, special unless user-defined). Arrays: [n_tokens] each, merges [n_merges]. */
typedef struct al__tok_spec {
    const char *name;  /* for messages (the GGUF file) */
    const char *model; /* "llama" or "gpt2" */
    const char *pre;   /* gpt2: the pre-tokenizer name (NULL: "default") */
    const char *const *tokens;
    int n_tokens;
    const char *const *merges;
    int n_merges;
    const float *scores;            /* llama: required */
    const int32_t *types;           /* or NULL */
    int add_space_prefix;           /* llama: prepend ▁ to every segment */
    int32_t unk_id, bos_id, eos_id; /* -1 none */
    int add_bos, add_eos;           /* -1: the model's default (llama: BOS; llama3: BOS) */
} al__tok_spec;
int al__hftok_from_spec(const al__tok_spec *s, al__hftok **out, al_error *err);
/* The names al__hftok_from_spec takes as pre, for messages: "gpt-2, llama-bpe, ...". */
const char *al__hftok_pre_names(void);

/* dir/tokenizer.json (+ tokenizer_config.json) parsed into an engine (hf_tokenizer.c). */
int al__hftok_open_dir(const char *dir, al__hftok **out, al_error *err);

/* Wrap an engine into a public al_tokenizer (takes ownership of the engine). */
int al__tokenizer_from_bpe(al__bpe *b, al_tokenizer **out, al_error *err);
int al__tokenizer_from_wordpiece(al__wordpiece *w, al_tokenizer **out, al_error *err);

/* The BOS a non-HF tokenizer has (GGUF metadata, the GPT-2 family): id, default, source. */
void al__tokenizer_set_bos(al_tokenizer *tk, int32_t id, int dflt, const char *from);
/* The manifest's "framing" object (al_framing_json's, as a cJSON child of parent). */
struct cJSON;
void al__framing_json(const al_framing *f, struct cJSON *parent);

#endif
