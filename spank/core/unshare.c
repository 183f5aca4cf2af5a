/* unshare.c: see unshare.h. */
#include <stdio.h>
#include <string.h>

#include "quote.h"
#include "strbuf.h"
#include "unshare.h"

#define WHAT "--container-unshare"

static const struct { int kind; const char *name; } kinds[] = {
	{ SQ_NS_NET, "net" }, { SQ_NS_IPC, "ipc" }, { SQ_NS_UTS, "uts" },
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

const char *sq_ns_name(int kind)
{
	for (size_t i = 0; i < NKINDS; i++)
		if (kinds[i].kind == kind)
			return kinds[i].name;
	return NULL;
}

int sq_unshare_parse(const char *text, int *mask, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX], word[32];
	const char *s, *e;
	size_t n, i;

	*mask = 0;
	if (text == NULL || *text == '\0')
		return sq_errf(err, errlen, WHAT ": empty value (use NS[,NS...] with NS one of net, "
			       "ipc, uts)");
	if (sq_text_check(WHAT, text, 256, err, errlen) != 0)
		return -1;
	for (s = text;; s = e + 1) {
		e = strchr(s, ',');
		n = e ? (size_t)(e - s) : strlen(s);
		if (n == 0)
			return sq_errf(err, errlen, WHAT ": '%s': empty namespace (remove the extra ',')",
				       sq_show(text, show, sizeof(show)));
		for (i = 0; i < NKINDS; i++)
			if (strlen(kinds[i].name) == n && strncmp(kinds[i].name, s, n) == 0)
				break;
		if (i == NKINDS) {
			snprintf(word, sizeof(word), "%.*s", (int)(n < 24 ? n : 24), s);
			return sq_errf(err, errlen, WHAT ": unknown namespace '%s' (use net, ipc or uts, "
				       "comma-separated)", sq_show(word, show, sizeof(show)));
		}
		*mask |= kinds[i].kind;
		if (e == NULL)
			return 0;
	}
}

const char *sq_unshare_str(int mask, char *buf, size_t buflen)
{
	size_t o = 0;

	if (buflen == 0)
		return buf;
	buf[0] = '\0';
	for (size_t i = 0; i < NKINDS && o < buflen; i++)
		if (mask & kinds[i].kind)
			o += (size_t)snprintf(buf + o, buflen - o, "%s%s", o ? "," : "", kinds[i].name);
	return buf;
}
