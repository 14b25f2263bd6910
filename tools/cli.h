/* cli.h: what every subcommand of the attnlim tool shares. A subcommand is a function
 * int cmd_NAME(int argc, char **argv) in tools/cmd_NAME.c (argv[0] is the subcommand),
 * returning the process exit status: 0 ok, 1 error (message printed), 2 usage error. */
#ifndef AL_CLI_H
#define AL_CLI_H

#include "attnlim.h"

#include <cjson/cJSON.h>
#include <stdio.h>

/* Every subcommand; defined weak so that a command whose file is absent is "not built". */
#define AL_CMD(name) int name(int argc, char **argv) __attribute__((weak))
AL_CMD(cmd_demo);
AL_CMD(cmd_normalize);
AL_CMD(cmd_jacobian);
AL_CMD(cmd_metrics);
AL_CMD(cmd_ks);
AL_CMD(cmd_tokenize);
AL_CMD(cmd_verify);
AL_CMD(cmd_make_model);
AL_CMD(cmd_info);
AL_CMD(cmd_capture);
AL_CMD(cmd_perplexity);
AL_CMD(cmd_embed);
AL_CMD(cmd_fetch);
AL_CMD(cmd_reproduce);
AL_CMD(cmd_diagnose);
AL_CMD(cmd_guidelines);
AL_CMD(cmd_train);
AL_CMD(cmd_study);
#undef AL_CMD

/* Ctrl-C for the long commands (reproduce, diagnose): SIGINT and SIGTERM only record the
 * signal, and the library's progress callback (al_set_progress, set here) then asks the run to
 * stop at its next unit of work; it returns AL_E_CANCELLED. A signal inherited as ignored stays
 * ignored. cli_interrupted() is the signal received, or 0. */
void cli_catch_interrupt(void);
int cli_interrupted(void);
/* After a failed run: when it was interrupted, prints "attnlim CMD: interrupted[; rerun with
 * --resume to continue]" (not when quiet) and returns 130 (128 + SIGINT; 143 for SIGTERM);
 * else cli_fail. */
int cli_fail_or_interrupted(const char *cmd, const al_error *err, int resumable, int quiet);
/* Prints "attnlim CMD: <message>" to stderr and returns 1 (use: return cli_fail("x", &err);) */
int cli_fail(const char *cmd, const al_error *err);
/* Runs body(argc, argv, d) between al_dist_open and al_dist_close (MPI_Finalize on every path
 * out of body): the commands that spread over mpirun ranks (MPI builds), else one process. */
int cli_with_dist(const char *cmd, int (*body)(int, char **, al_dist *), int argc, char **argv);
/* Prints "attnlim CMD: <formatted>" (+ a hint to --help) and returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- options: each command declares its options once, in a table of cli_opt (in its own
 * file); the parser (cli_next) and --help (cli_print_options) both read that table. */
typedef struct cli_opt {
    int id;                     /* the command's own code for it (> 0), returned by cli_next */
    const char *name;           /* "--model"; NULL: a line of prose in --help (help), or `more` */
    const char *arg;            /* the value's name in --help ("M"); NULL: a flag without a value */
    const char *help;           /* its --help text, lines separated by '\n' */
    const char *alias;          /* another spelling ("-q"), or NULL */
    const struct cli_opt *more; /* (name NULL) a shared table included here, e.g. CLI_ATTN_OPTS */
} cli_opt;
/* A table ends with an entry of id 0 and neither name, help nor more: CLI_OPT_END. */
#define CLI_OPT_END                                                                                \
    { 0, NULL, NULL, NULL, NULL, NULL }
/* A line of prose between options in --help (printed as is, with a newline). */
#define CLI_TEXT(s)                                                                                \
    { -1, NULL, NULL, s, NULL, NULL }
#define CLI_MORE(t)                                                                                \
    { -1, NULL, NULL, NULL, NULL, t }

/* Walks argv[1..argc) of command cmd against opts. --help and -h print usage(stdout) (after it,
 * cli_next returns CLI_STOP with status 0); an unknown option, and an option that takes a
 * value and has none, print the usage error ("unknown option 'ARG'", with "did you mean
 * '--x'?" when one of the table's names is near ARG, al_nearest; "--x needs a value") and
 * return CLI_STOP with status 2. quiet: print nothing (the ranks other than 0 of an MPI run). */
typedef struct cli_parser {
    const char *cmd;
    int argc;
    char **argv;
    const cli_opt *opts;
    void (*usage)(FILE *);
    int positional; /* takes positional words (else each is an unknown option) */
    int quiet;
    int i;           /* the word just read */
    const char *opt; /* the option just read ("--model"), as the table spells it */
    int status;      /* after CLI_STOP: the exit status */
} cli_parser;
enum { CLI_END = 0, CLI_POS = -1, CLI_STOP = -2 };
/* The next argument: an option's id (*val its value, or NULL for a flag), CLI_POS (*val a
 * positional word: one not starting with '-', or "-" itself; only when p->positional),
 * CLI_END, or CLI_STOP. */
int cli_next(cli_parser *p, const char **val);
/* The options of a table for --help: "  --name ARG" padded to column col, then its help; lines
 * of prose as they are. */
void cli_print_options(FILE *f, const cli_opt *opts, int col);
/* A usage error of the parser's command (cli_usage_error unless quiet): sets p->status = 2 and
 * returns 2. */
int cli_parse_error(cli_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* argv [argc] with every "--name=value" after argv[0] split into "--name" "value", so that every
 * command takes both spellings: a new NULL-terminated argv of *out_argc entries; *owned lists
 * (NULL-terminated) the strings to free after the new argv and itself. NULL when out of memory. */
char **cli_split_equals(int argc, char **argv, int *out_argc, char ***owned);

/* The corpus name of a prompt given on the command line (--text): AL_CORPUS_TEXT + text, kept
 * until exit. NULL when out of memory. */
const char *cli_text_corpus(const char *text);
/* Is corpus a prompt (cli_text_corpus)? */
int cli_is_prompt(const char *corpus);

/* malloc / calloc naming what ran out: NULL with err set ("out of memory: N bytes for WHAT"). */
void *cli_malloc(size_t n, const char *what, al_error *err);
void *cli_calloc(size_t count, size_t size, const char *what, al_error *err);

/* Strict number parsing of a command-line value; what names the option in the message. */
int cli_parse_double(const char *s, const char *what, double *out, al_error *err);
int cli_parse_int(const char *s, const char *what, long lo, long hi, long *out, al_error *err);
/* A seed: decimal digits only (no sign, space or exponent), 0..2^64 - 1, never wrapped. */
int cli_parse_u64(const char *s, const char *what, uint64_t *out, al_error *err);
/* "1,5,10" or "1-16" ranges mixed: "1-16,18,20"; *out malloc'ed. An empty item, a bad item, a
 * backwards range and a list expanding to more than CLI_MAX_LIST entries are errors naming the
 * option and the item (checked before anything is allocated). */
#define CLI_MAX_LIST 1000000
int cli_parse_int_list(const char *s, const char *what, int **out, int *n, al_error *err);
int cli_parse_double_list(const char *s, const char *what, double **out, int *n, al_error *err);
/* The attention variant options of reproduce, diagnose and guidelines: --attention R,
 * --attention-normalizer M, --attention-layers LIST, --attention-heads LIST (a value v after
 * option a). Returns 1 when a is one of them (s filled; lists[2] own the index lists, freed by
 * the caller), 0 when not, -1 on a bad value (err set). */
int cli_attn_arg(const char *a, const char *v, al_attn_spec *s, int *lists[2], al_error *err);
/* Their table (ids CLI_O_ATTENTION..; include it with CLI_MORE(CLI_ATTN_OPTS)). */
enum {
    CLI_O_ATTENTION = 1000,
    CLI_O_ATTENTION_NORMALIZER,
    CLI_O_ATTENTION_LAYERS,
    CLI_O_ATTENTION_HEADS
};
extern const cli_opt CLI_ATTN_OPTS[];
/* The usage error of a command where --normalizer is not taken (perplexity, capture, train):
 * --normalizer only ever means re-normalising captured logits (reproduce, diagnose); the
 * normalizer inside the model's forward is --attention-normalizer everywhere. */
extern const char CLI_NORMALIZER_MOVED[];
/* Is id one of CLI_ATTN_OPTS's? */
#define CLI_IS_ATTN(id) ((id) >= CLI_O_ATTENTION && (id) <= CLI_O_ATTENTION_HEADS)

/* How a corpus becomes windows (include/attnlim.h al_framing): --bos / --no-bos (also --bos
 * on|off, --bos=on) and --wrap / --no-wrap, in reproduce, diagnose (this table) and capture,
 * perplexity (RUN_OPTS). */
enum { CLI_O_BOS = 1100, CLI_O_NO_BOS, CLI_O_WRAP, CLI_O_NO_WRAP };
extern const cli_opt CLI_FRAMING_OPTS[];
/* A switch just read by cli_next: id == on (a flag, optionally followed by the word on or off,
 * which it takes) or off ("--no-NAME"): *dst 1 on, 2 off; returns 1. 0 when id is neither; 2
 * after a usage error (a word other than on / off). */
int cli_switch_take(cli_parser *p, int on, int off, int id, int *dst);
/* cli_switch_take for CLI_FRAMING_OPTS's ids (bos, wrap: 0 default, 1 on, 2 off). */
int cli_framing_take(cli_parser *p, int id, int *bos, int *wrap);
/* "all" (or NULL) or such a list of indices in [0, n) into mask[n] (an index outside is an
 * error naming what). */
int cli_parse_sel(const char *s, const char *what, int n, uint8_t *mask, al_error *err);

/* Numbers from a text buffer: whitespace- or comma-separated; one row per non-empty line.
 * One line -> a 1-D array; several lines of equal length -> 2-D. NaN/Inf are rejected with
 * the position. name is used in messages. */
int cli_parse_numbers(const char *text, size_t len, const char *name, al_array *out, al_error *err);
/* An array from path (NULL or "-" reads stdin): a .npy file when the name ends in .npy, the
 * first byte is 0x93 or the bytes are not text (NUL or other control characters), its magic then
 * required ("not a .npy file (bad magic)"); else text numbers. An empty file and an array
 * without elements (a zero dimension) are errors naming the file. */
int cli_read_array(const char *path, al_array *out, al_error *err);
/* "<stdin>" for NULL or "-", else path. */
const char *cli_input_name(const char *path);
/* As cli_read_array, but text is one flat list: all its numbers in order, lines of any length. */
int cli_read_flat(const char *path, al_array *out, al_error *err);

/* The options shared by normalize and jacobian (parsed by cmd_norm_options, cmd_normalize.c). */
typedef struct norm_opts {
    al_norm nm;
    const char *input;
    int json;
    int full; /* jacobian --full */
    int help;
} norm_opts;
extern const cli_opt CLI_NORM_OPTS[];
enum { CLI_NORM_FULL = 100, CLI_NORM_JSON }; /* --full (jacobian), --json: ids in the tables */
int cmd_norm_options(const char *cmd, int argc, char **argv, const cli_opt *opts,
                     void (*usage)(FILE *), norm_opts *o);
/* Logits rows from input (see cli_read_array): a 1-D row or 2-D rows, else an error naming the
 * input. */
int cli_read_rows(const char *input, al_array *out, al_error *err);
/* Prefixes err->msg (an error on row `row` of rows a read from input) with the input's name and,
 * for 2-D input, "row R: ". */
void cli_row_error(const char *input, const al_array *a, int64_t row, al_error *err);

/* Prints a JSON object on stdout (formatted when pretty), frees it. */
void cli_print_json(cJSON *obj, int pretty);
/* A JSON number or null for non-finite values. */
cJSON *cli_json_num(double v);
cJSON *cli_json_array_d(const double *v, int64_t n);

#endif
