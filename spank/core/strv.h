/*
 * strv.h: a growable NULL-terminated array of heap strings (a "strv"), the one the plugin
 * grows for the runtime's environment, the conf file's lines, the importer's environment,
 * the running-container records and `enroot list`'s names.
 *
 * An array starts as NULL with *n = 0; each push keeps it NULL-terminated, *n its length.
 * Free it with sq_strv_free (NULL is fine).
 */
#ifndef SQUALL_CORE_STRV_H
#define SQUALL_CORE_STRV_H

#include <stddef.h>

/* Append a copy of s. 0 ok; -1 out of memory (the array is left as it was, still
 * NULL-terminated). */
int sq_strv_push(char ***arr, size_t *n, const char *s);
/* Append a copy of the first len bytes of s. 0 ok; -1 out of memory. */
int sq_strv_pushn(char ***arr, size_t *n, const char *s, size_t len);
/* Append each non-empty line of text ("A\nB\n"; NULL: none). The array exists afterwards
 * even when nothing was appended (an empty array, not NULL). 0 ok; -1 out of memory. */
int sq_strv_push_lines(char ***arr, size_t *n, const char *text);
void sq_strv_free(char **arr);

#endif
