/*
 * quote.h: shell quoting and the byte-level text checks every parser shares.
 *
 * Shell quoting uses single quotes only ('it'\''s'), which bash never expands:
 * no $(), no backticks, no globbing, no variables survive inside them.
 */
#ifndef SQUALL_CORE_QUOTE_H
#define SQUALL_CORE_QUOTE_H

#include <stddef.h>

/* Quote s[0..len) as one bash word. A NUL byte inside is refused (bash cannot hold it).
 * *out is a heap string: free it with sq_str_free(). 0 ok, -1 error (err filled). */
int sq_shell_quote(const char *s, size_t len, char **out, char *err, size_t errlen);

/* Free any string the core documents as "free with sq_str_free". NULL is fine. */
void sq_str_free(char *s);

/* 0 when s[0..len) is well-formed UTF-8 (no overlong forms, no surrogates, nothing
 * above U+10FFFF); -1 otherwise, with *bad (if not NULL) the offset of the first bad byte. */
int sq_utf8_check(const char *s, size_t len, size_t *bad);

/* 1 when s[0..len) is a shell/environment identifier: [A-Za-z_][A-Za-z0-9_]*. */
int sq_is_identifier(const char *s, size_t len);

/* Check a user-supplied value: not empty, at most max bytes, valid UTF-8, no control
 * characters (which covers newlines and tabs). On error the one line starts with `what`
 * (e.g. "--container-workdir") and says how to fix it. 0 ok, -1 error. */
int sq_text_check(const char *what, const char *s, size_t max, char *err, size_t errlen);

/* Boolean spellings Pyxis takes (plugstack.conf, PYXIS_CONTAINER_* variables), any case:
 * 1 true yes y on -> 1; 0 false no n off -> 0; anything else (empty too) -> -1. */
int sq_bool_parse(const char *s);

#endif
