/*
 * strbuf.h: bounded string building shared by the core modules.
 *
 * A growable heap buffer that remembers an allocation failure, so callers append
 * freely and check once at the end; the one-line error formatter every core
 * function uses; and a renderer that makes any user value safe to quote inside
 * that one line (control bytes escaped, long values shortened).
 * Internal to the core: no .cdef, Python does not call these.
 */
#ifndef SQUALL_CORE_STRBUF_H
#define SQUALL_CORE_STRBUF_H

#include <stddef.h>

struct sq_buf {
	char *data;   /* NUL-terminated once anything was added */
	size_t len;
	size_t cap;
	int oom;      /* set on the first failed allocation; later appends do nothing */
};

void sq_buf_init(struct sq_buf *b);
void sq_buf_add(struct sq_buf *b, const char *s);
void sq_buf_addn(struct sq_buf *b, const char *s, size_t n);
void sq_buf_addc(struct sq_buf *b, char c);
void sq_buf_addf(struct sq_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The built string (never NULL unless allocation failed; "" when nothing was added).
 * The caller owns it and frees it with free(); b is reset to empty. */
char *sq_buf_take(struct sq_buf *b);
void sq_buf_release(struct sq_buf *b);

/* The size of an error buffer: one line naming the cause and the fix, with a path or a
 * program's last output lines in it. Every caller's err buffer is this size. */
#define SQ_ERR_LEN 4096

/* Write one formatted line into err (truncated, always NUL-terminated when errlen > 0).
 * Returns -1 so that error paths read `return sq_errf(err, errlen, ...);`. */
int sq_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Render s for an error message into buf: printable ASCII and valid UTF-8 kept,
 * other bytes as \xHH, control characters as \n \t \xHH, cut to about 80 columns
 * with "..." so a 5000-byte value does not flood the terminal. Returns buf. */
const char *sq_show(const char *s, char *buf, size_t buflen);
#define SQ_SHOW_MAX 128

/* Length (1-4) of the well-formed UTF-8 sequence at s (at most n bytes available),
 * 0 when the bytes there are not one (overlong, surrogate, > U+10FFFF, truncated). */
size_t sq_utf8_seqlen(const unsigned char *s, size_t n);

/* Duplicate n bytes as a NUL-terminated heap string (NULL on allocation failure). */
char *sq_strndup(const char *s, size_t n);

#endif
