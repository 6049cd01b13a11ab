/* yamlerr.h -- where a YAML loader's error is: libcyaml's complaint captured, its key path placed with libyaml. */
#ifndef FQ_YAMLERR_H
#define FQ_YAMLERR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include <cyaml/cyaml.h>

/* The one error locator of the YAML loaders (lib/config.c, lib/scenario.c).
 * A key path is written "plans[2].weight": mapping keys joined by '.',
 * sequence entries counted from 0 in brackets; keys contain neither. */

#define FQ_YERR_STEPS 8         /* the deepest key path placed */
#define FQ_YERR_PATH_MAX 512

/* One step of a key path: a mapping key, or a sequence index if key is NULL. */
typedef struct fq_yerr_step {
    const char *key;            /* into the path; not NUL-terminated */
    size_t klen;
    size_t index;               /* a sequence entry, when key is NULL */
} fq_yerr_step;

/* A frame of libcyaml's backtrace. */
typedef struct fq_yerr_frame {
    char key[64];               /* "in mapping field": the field */
    size_t entry;               /* "in sequence entry": counted from 1; else 0 */
    bool is_key;                /* a frame "in mapping field" */
    size_t line, col;           /* libcyaml's position for it */
} fq_yerr_frame;

/* What libcyaml logged about a failed load: its first message and the key
 * path of its backtrace, innermost frame first. Zero it before the load and
 * give it to libcyaml as log_ctx, with fq_yerr_log_fn as log_fn. */
typedef struct fq_yerr_log {
    char reason[512];           /* first message, without "Load: " */
    fq_yerr_frame frames[FQ_YERR_STEPS];
    size_t n;
} fq_yerr_log;

void fq_yerr_log_fn(cyaml_log_t level, void *ctx, const char *fmt, va_list args);

/* Split path into at most max steps; returns how many. */
size_t fq_yerr_steps(fq_yerr_step *out, const char *path, size_t max);

/* The position (1-based) in yaml of the deepest node of path, then key (if
 * given, taken as written) that the document holds, the last key counted
 * nth times (2: where a key given twice is given again). False if it holds
 * none of the keys: an absent section is better named than placed at the
 * top. */
bool fq_yerr_locate(const char *yaml, size_t len, const char *path, const char *key,
                    unsigned nth, size_t *line, size_t *col);

/* Where the failed load that l captured is: its key path into path (cap
 * bytes), with the unknown key libcyaml names at its end and copied into
 * unknown (ucap bytes; "" when it names none), placed with fq_yerr_locate
 * (key counted nth times), else at libcyaml's innermost frame. *line is 0
 * when neither knows. */
void fq_yerr_place(const fq_yerr_log *l, const char *yaml, size_t len, unsigned nth,
                   char *path, size_t cap, char *unknown, size_t ucap, size_t *line,
                   size_t *col);

/* Write "name:line:col: path: reason" into err (errlen bytes), leaving out
 * the position when line is 0 and the path when it is NULL or "". */
void fq_yerr_message(char *err, size_t errlen, const char *name, size_t line, size_t col,
                     const char *path, const char *reason);

#endif
