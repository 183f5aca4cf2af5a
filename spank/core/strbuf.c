/* strbuf.c: growable strings, the one-line error formatter, safe value rendering. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

void sq_buf_init(struct sq_buf *b)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->oom = 0;
}

/* Make room for `more` bytes plus the terminating NUL. */
static int grow(struct sq_buf *b, size_t more)
{
	size_t need, cap;
	char *p;

	if (b->oom)
		return -1;
	if (more > ((size_t)-1) / 2 - b->len) {
		b->oom = 1;
		return -1;
	}
	need = b->len + more + 1;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap *= 2;
	p = realloc(b->data, cap);
	if (p == NULL) {
		b->oom = 1;
		return -1;
	}
	b->data = p;
	b->cap = cap;
	return 0;
}

void sq_buf_addn(struct sq_buf *b, const char *s, size_t n)
{
	if (grow(b, n) != 0)
		return;
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void sq_buf_add(struct sq_buf *b, const char *s)
{
	sq_buf_addn(b, s, strlen(s));
}

void sq_buf_addc(struct sq_buf *b, char c)
{
	sq_buf_addn(b, &c, 1);
}

void sq_buf_addf(struct sq_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->oom = 1;
		return;
	}
	if (grow(b, (size_t)n) != 0)
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

char *sq_buf_take(struct sq_buf *b)
{
	char *s;

	if (b->oom) {
		sq_buf_release(b);
		return NULL;
	}
	s = b->data ? b->data : strdup("");
	sq_buf_init(b);
	return s;
}

void sq_buf_release(struct sq_buf *b)
{
	free(b->data);
	sq_buf_init(b);
}

int sq_errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return -1;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

size_t sq_utf8_seqlen(const unsigned char *s, size_t n)
{
	unsigned int c;
	size_t len, i;

	if (n == 0)
		return 0;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		len = 2;
		c = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		len = 3;
		c = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		len = 4;
		c = s[0] & 0x07;
	} else {
		return 0;    /* continuation byte, overlong lead (c0/c1) or beyond f4 */
	}
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && c < 0x800) || (len == 4 && c < 0x10000))
		return 0;    /* overlong */
	if (c >= 0xd800 && c <= 0xdfff)
		return 0;    /* UTF-16 surrogate */
	if (c > 0x10ffff)
		return 0;
	return len;
}

const char *sq_show(const char *s, char *buf, size_t buflen)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n, used = 0, k, step, shown = 0;
	char tmp[8];

	if (buflen == 0)
		return buf;
	buf[0] = '\0';
	if (s == NULL)
		return buf;
	n = strlen(s);
	/* Leave room for "..." and the NUL whatever is appended. */
	while (*p != '\0' && shown < 80) {
		size_t seq = sq_utf8_seqlen(p, n - (size_t)((const char *)p - s));

		step = 1;
		if (*p >= 0x20 && *p < 0x7f) {
			tmp[0] = (char)*p;
			tmp[1] = '\0';
			k = 1;
		} else if (*p == '\n') {
			memcpy(tmp, "\\n", 3);
			k = 2;
		} else if (*p == '\t') {
			memcpy(tmp, "\\t", 3);
			k = 2;
		} else if (*p >= 0x80 && seq > 1) {
			memcpy(tmp, p, seq);
			tmp[seq] = '\0';
			k = seq;
			step = seq;
		} else {
			snprintf(tmp, sizeof(tmp), "\\x%02x", *p);
			k = 4;
		}
		if (used + k + 4 >= buflen)
			break;
		memcpy(buf + used, tmp, k);
		used += k;
		buf[used] = '\0';
		p += step;
		shown++;
	}
	if (*p != '\0' && used + 4 < buflen) {
		memcpy(buf + used, "...", 4);
		used += 3;
	}
	return buf;
}

char *sq_strndup(const char *s, size_t n)
{
	char *p = malloc(n + 1);

	if (p == NULL)
		return NULL;
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}
