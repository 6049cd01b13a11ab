/* fuzz.h -- what the libFuzzer targets of tests/fuzz share: the entry point's
 * prototype, a check that stops the run on a broken promise, and the rule a
 * refusal's sentence keeps. docs/fuzzing.md says how to run them. */
#ifndef FQ_FUZZ_H
#define FQ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A promise of the code under test that the input broke: libFuzzer keeps
 * the input as a crash, as it does for a sanitizer's report. */
#define FUZZ_CHECK(cond)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: broken promise: %s\n", __FILE__, __LINE__, \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* err is a sentence fit for a header or a log line: not empty, printable
 * ASCII (no CR or LF to split a header), and NUL-terminated within cap. */
static inline int fuzz_sentence_ok(const char *err, size_t cap)
{
    size_t n = strnlen(err, cap);
    if (n == 0 || n == cap)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)err[i] < 0x20 || (unsigned char)err[i] > 0x7e)
            return 0;
    return 1;
}

/* A copy of data[0..size) with a NUL after it, for the parsers that take a
 * C string. The caller frees it. */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

#endif
