/* mountinfo.c: see mountinfo.h. */
#include <stdio.h>
#include <string.h>

#include "mountinfo.h"

/* Field 3 (MAJ:MIN) and the filesystem type (first field after " - ") of one line. */
static int parse_line(const char *line, size_t len, char dev[32], char fstype[64])
{
	const char *p = line, *end = line + len, *sep;
	size_t n;

	for (int field = 0; field < 2; field++) {
		while (p < end && *p != ' ')
			p++;
		if (p >= end)
			return -1;
		p++;
	}
	for (n = 0; p + n < end && p[n] != ' '; n++)
		;
	if (n == 0 || n >= 32)
		return -1;
	memcpy(dev, p, n);
	dev[n] = '\0';
	for (sep = p; sep + 3 <= end && memcmp(sep, " - ", 3) != 0; sep++)
		;
	if (sep + 3 > end)
		return -1;
	sep += 3;
	for (n = 0; sep + n < end && sep[n] != ' '; n++)
		;
	if (n == 0 || n >= 64)
		return -1;
	memcpy(fstype, sep, n);
	fstype[n] = '\0';
	return 0;
}

/* 1 when dev is the device of some line of text. */
static int has_dev(const char *text, const char *dev)
{
	for (const char *line = text; line && *line;) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char d[32], t[64];

		if (parse_line(line, len, d, t) == 0 && strcmp(d, dev) == 0)
			return 1;
		line = nl ? nl + 1 : NULL;
	}
	return 0;
}

/* 1 when dev is one of the space-separated words of list. */
static int listed(const char *list, const char *dev)
{
	size_t n = strlen(dev);

	for (const char *p = list; p && *p; p = strchr(p, ' ') ? strchr(p, ' ') + 1 : NULL)
		if (strncmp(p, dev, n) == 0 && (p[n] == ' ' || p[n] == '\0'))
			return 1;
	return 0;
}

int sq_mountinfo_fresh_tmpfs(const char *container, const char *host, char *out,
			     size_t outlen)
{
	size_t o = 0;

	if (outlen == 0)
		return -1;
	out[0] = '\0';
	for (const char *line = container; line && *line;) {
		const char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char dev[32], fstype[64];
		int ok = parse_line(line, len, dev, fstype) == 0;

		line = nl ? nl + 1 : NULL;
		if (!ok || strcmp(fstype, "tmpfs") != 0 || (host != NULL && has_dev(host, dev)) ||
		    listed(out, dev))
			continue;
		if (o + strlen(dev) + 2 > outlen)
			return -1;
		o += (size_t)snprintf(out + o, outlen - o, "%s%s", o ? " " : "", dev);
	}
	return 0;
}
