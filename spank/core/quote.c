/* quote.c: single-quote shell quoting and the shared text checks. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "quote.h"
#include "strbuf.h"

int sq_shell_quote(const char *s, size_t len, char **out, char *err, size_t errlen)
{
	struct sq_buf b;
	size_t i;

	*out = NULL;
	if (memchr(s, '\0', len) != NULL)
		return sq_errf(err, errlen, "shell quoting: value holds a NUL byte at offset %zu "
			       "(remove it: a shell word cannot contain NUL)",
			       (size_t)((const char *)memchr(s, '\0', len) - s));
	sq_buf_init(&b);
	sq_buf_addc(&b, '\'');
	for (i = 0; i < len; i++) {
		/* Close the quote, add an escaped quote, reopen: 'it'\''s'. */
		if (s[i] == '\'')
			sq_buf_add(&b, "'\\''");
		else
			sq_buf_addc(&b, s[i]);
	}
	sq_buf_addc(&b, '\'');
	*out = sq_buf_take(&b);
	if (*out == NULL)
		return sq_errf(err, errlen, "shell quoting: out of memory");
	return 0;
}

void sq_str_free(char *s)
{
	free(s);
}

int sq_utf8_check(const char *s, size_t len, size_t *bad)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, n;

	while (i < len) {
		n = sq_utf8_seqlen(p + i, len - i);
		if (n == 0) {
			if (bad != NULL)
				*bad = i;
			return -1;
		}
		i += n;
	}
	return 0;
}

int sq_is_identifier(const char *s, size_t len)
{
	size_t i;

	if (len == 0)
		return 0;
	for (i = 0; i < len; i++) {
		char c = s[i];
		int alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';

		if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
			return 0;
	}
	return 1;
}

int sq_text_check(const char *what, const char *s, size_t max, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX];
	size_t len, i, bad;

	len = strlen(s);
	if (len == 0)
		return sq_errf(err, errlen, "%s: empty value (give a value or leave the option out)",
			       what);
	if (len > max)
		return sq_errf(err, errlen, "%s: value is %zu bytes long, the limit is %zu "
			       "(use a shorter value)", what, len, max);
	if (sq_utf8_check(s, len, &bad) != 0)
		return sq_errf(err, errlen, "%s: '%s' is not valid UTF-8 (byte 0x%02x at offset %zu; "
			       "use UTF-8 text)", what, sq_show(s, show, sizeof(show)),
			       (unsigned char)s[bad], bad);
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c == 0x7f)
			return sq_errf(err, errlen, "%s: '%s' holds a control character (0x%02x at "
				       "offset %zu; remove newlines, tabs and other control bytes)",
				       what, sq_show(s, show, sizeof(show)), c, i);
	}
	return 0;
}

int sq_bool_parse(const char *s)
{
	static const char *const yes[] = { "1", "true", "yes", "y", "on" };
	static const char *const no[] = { "0", "false", "no", "n", "off" };
	size_t i;

	for (i = 0; s != NULL && i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0)
			return 1;
		if (strcasecmp(s, no[i]) == 0)
			return 0;
	}
	return -1;
}
