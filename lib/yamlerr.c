/* yamlerr.c -- where a YAML loader's error is: libcyaml's complaint captured, its key path placed with libyaml. */
#include "yamlerr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

/*
 * Principles
 *
 * - libcyaml reports its errors through the log callback as a message and a
 *   backtrace of the key path; they are captured here, not printed.
 * - libcyaml's positions point at the event before the one at fault (an
 *   unknown key is reported at the start of its mapping, or at the previous
 *   value), so a position is looked up again with libyaml from the key
 *   path; libcyaml's own is the fallback. The loaders place their
 *   validation errors by key path the same way.
 */

void fq_yerr_log_fn(cyaml_log_t level, void *ctx, const char *fmt, va_list args)
{
    fq_yerr_log *l = ctx;
    char msg[512];
    if (level < CYAML_LOG_ERROR)
        return;
    vsnprintf(msg, sizeof(msg), fmt, args);
    msg[strcspn(msg, "\n")] = '\0';
    if (l->n < FQ_YERR_STEPS) {
        fq_yerr_frame *f = &l->frames[l->n];
        memset(f, 0, sizeof(*f));
        if (sscanf(msg, "  in mapping field '%63[^']' (line: %zu, column: %zu)",
                   f->key, &f->line, &f->col) == 3) {
            f->is_key = true;
            l->n++;
            return;
        }
        if (sscanf(msg, "  in sequence entry '%zu' (line: %zu, column: %zu)",
                   &f->entry, &f->line, &f->col) == 3 ||
            sscanf(msg, "  in mapping (line: %zu, column: %zu)",
                   &f->line, &f->col) == 2) {
            l->n++;
            return;
        }
    }
    if (!l->reason[0] && strncmp(msg, "Load: Backtrace", 15) != 0 &&
        strncmp(msg, "  in ", 5) != 0)
        snprintf(l->reason, sizeof(l->reason), "%s",
                 strncmp(msg, "Load: ", 6) == 0 ? msg + 6 : msg);
}

size_t fq_yerr_steps(fq_yerr_step *st, const char *path, size_t max)
{
    size_t n = 0;
    const char *p = path;
    while (*p && n < max) {
        if (*p == '.') {
            p++;
        } else if (*p == '[') {
            char *end;
            st[n++] = (fq_yerr_step){NULL, 0, strtoul(p + 1, &end, 10)};
            p = *end == ']' ? end + 1 : end;
        } else {
            size_t k = strcspn(p, ".[");
            st[n++] = (fq_yerr_step){p, k, 0};
            p += k;
        }
    }
    return n;
}

static bool yerr_pull(yaml_parser_t *p, yaml_event_t *e)
{
    return yaml_parser_parse(p, e) != 0;
}

/* Consume the rest of a node whose first event was of type t. */
static bool yerr_skip(yaml_parser_t *p, yaml_event_type_t t)
{
    int depth = t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT;
    while (depth > 0) {
        yaml_event_t e;
        if (!yerr_pull(p, &e))
            return false;
        yaml_event_type_t et = e.type;
        yaml_event_delete(&e);
        if (et == YAML_MAPPING_START_EVENT || et == YAML_SEQUENCE_START_EVENT)
            depth++;
        else if (et == YAML_MAPPING_END_EVENT || et == YAML_SEQUENCE_END_EVENT)
            depth--;
        else if (et == YAML_STREAM_END_EVENT || et == YAML_NO_EVENT)
            return false;
    }
    return true;
}

/* Find one step inside the node that starts with an event of type *t: the
 * nth occurrence of a key (the key's position), or a sequence entry. On
 * success the parser stands after the first event of the node found, *t is
 * its type and *mark its position. */
static bool yerr_find_step(yaml_parser_t *p, const fq_yerr_step *st, unsigned nth,
                           yaml_event_type_t *t, yaml_mark_t *mark)
{
    if (*t != (st->key ? YAML_MAPPING_START_EVENT : YAML_SEQUENCE_START_EVENT))
        return false;
    unsigned seen = 0;
    for (size_t idx = 0;; idx++) {
        yaml_event_t e;
        if (!yerr_pull(p, &e))
            return false;
        yaml_event_type_t et = e.type;
        yaml_mark_t m = e.start_mark;
        bool hit = st->key ? et == YAML_SCALAR_EVENT &&
                                 e.data.scalar.length == st->klen &&
                                 memcmp(e.data.scalar.value, st->key, st->klen) == 0 &&
                                 ++seen == nth
                           : idx == st->index;
        yaml_event_delete(&e);
        if (et == YAML_MAPPING_END_EVENT || et == YAML_SEQUENCE_END_EVENT)
            return false;
        if (st->key) {  /* past the key, to its value */
            if (!yerr_skip(p, et) || !yerr_pull(p, &e))
                return false;
            et = e.type;
            yaml_event_delete(&e);
        }
        if (hit) {
            *t = et;
            *mark = m;
            return true;
        }
        if (!yerr_skip(p, et))
            return false;
    }
}

bool fq_yerr_locate(const char *yaml, size_t len, const char *path, const char *key,
                    unsigned nth, size_t *line, size_t *col)
{
    fq_yerr_step st[FQ_YERR_STEPS + 1];
    size_t n = fq_yerr_steps(st, path, FQ_YERR_STEPS);
    if (key)
        st[n++] = (fq_yerr_step){key, strlen(key), 0};
    yaml_parser_t p;
    yaml_event_t e;
    yaml_event_type_t t = YAML_NO_EVENT;
    yaml_mark_t mark = {0, 0, 0};
    bool found = false;
    if (!yaml || !yaml_parser_initialize(&p))
        return false;
    yaml_parser_set_input_string(&p, (const unsigned char *)yaml, len);
    /* Stream start, document start, then the root node. */
    for (int k = 0; k < 3 && yerr_pull(&p, &e); k++) {
        t = e.type;
        mark = e.start_mark;
        yaml_event_delete(&e);
        found = k == 2 && (t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT ||
                           t == YAML_SCALAR_EVENT || t == YAML_ALIAS_EVENT);
    }
    size_t i = 0;
    for (; found && i < n; i++) {
        yaml_mark_t m;
        if (!yerr_find_step(&p, &st[i], i + 1 == n ? nth : 1, &t, &m))
            break;
        mark = m;
    }
    found = found && (i > 0 || n == 0);
    if (found) {
        *line = mark.line + 1;
        *col = mark.column + 1;
    }
    yaml_parser_delete(&p);
    return found;
}

void fq_yerr_place(const fq_yerr_log *l, const char *yaml, size_t len, unsigned nth,
                   char *path, size_t cap, char *unknown, size_t ucap, size_t *line,
                   size_t *col)
{
    char key[256];
    size_t used = 0;
    path[0] = '\0';
    for (size_t i = l->n; i-- > 0;) {   /* outermost first */
        if (l->frames[i].is_key)
            used += snprintf(path + used, cap - used, "%s%s", used ? "." : "",
                             l->frames[i].key);
        else if (l->frames[i].entry)
            used += snprintf(path + used, cap - used, "[%zu]", l->frames[i].entry - 1);
        if (used >= cap)
            used = cap - 1;
    }
    bool is_unknown = sscanf(l->reason, "Unexpected key: %255[^\n]", key) == 1;
    snprintf(unknown, ucap, "%s", is_unknown ? key : "");
    *line = *col = 0;
    if (!fq_yerr_locate(yaml, len, path, is_unknown ? key : NULL, nth, line, col) && l->n) {
        *line = l->frames[0].line;
        *col = l->frames[0].col;
    }
    if (is_unknown)
        snprintf(path + used, cap - used, "%s%s", used ? "." : "", key);
}

void fq_yerr_message(char *err, size_t errlen, const char *name, size_t line, size_t col,
                     const char *path, const char *reason)
{
    if (!err || errlen == 0)
        return;
    char where[64] = "";
    if (line)
        snprintf(where, sizeof(where), ":%zu:%zu", line, col);
    snprintf(err, errlen, "%s%s: %s%s%s", name, where, path ? path : "",
             path && *path ? ": " : "", reason);
}
