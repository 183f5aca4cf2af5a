/* nodecache.c: see nodecache.h. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lifecycle.h"
#include "nodecache.h"

int sq_cache_key(const char *identity, const unsigned char *superblock, size_t len,
		 char out[33])
{
	char hex[2 * 96 + 1];
	const char *parts[] = { "squall-cache-1", identity ? identity : "", hex, NULL };
	char *const env[] = { NULL };

	if (len > 96)
		len = 96;
	for (size_t i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", superblock[i]);
	hex[2 * len] = '\0';
	return sq_life_key(parts, env, "", out);
}

int sq_cache_evict_plan(const struct sq_cache_entry *entries, size_t n,
			unsigned long long max_bytes, long long max_age_s, long long now,
			int *mark)
{
	unsigned long long total = 0;
	int marked = 0;

	for (size_t i = 0; i < n; i++) {
		/* last_use is a file's mtime, which its owner can set to anything: compute
		 * the age without overflow (a time in the future is age 0) */
		long long age;

		if (__builtin_sub_overflow(now, entries[i].last_use, &age))
			age = entries[i].last_use > now ? 0 : LLONG_MAX;
		mark[i] = !entries[i].in_use && age > max_age_s;
		marked += mark[i];
		if (!mark[i])
			total += entries[i].bytes;
	}
	while (total > max_bytes) {
		size_t oldest = n;
		for (size_t i = 0; i < n; i++)
			if (!mark[i] && !entries[i].in_use &&
			    (oldest == n || entries[i].last_use < entries[oldest].last_use))
				oldest = i;
		if (oldest == n)
			break;     /* what is left is in use */
		mark[oldest] = 1;
		marked++;
		total -= entries[oldest].bytes;
	}
	return marked;
}

int sq_yield_next(int duty, const struct sq_yield_obs *o)
{
	unsigned long long others, share;

	if (o == NULL)
		return SQ_YIELD_FLOOR;
	if (duty < SQ_YIELD_FLOOR)
		duty = SQ_YIELD_FLOOR;
	if (duty > SQ_YIELD_FULL)
		duty = SQ_YIELD_FULL;
	others = o->busy_us > o->own_us ? o->busy_us - o->own_us : 0;
	/* others / window > CPU_PERMILLE / 1000, without dividing by a zero window */
	if (others / 1000 > o->window_us / 1000 * SQ_YIELD_CPU_PERMILLE / 1000 ||
	    (o->window_us == 0 && others > 0))
		return SQ_YIELD_FLOOR;
	/* The extractor may itself have stalled for all of its running share. */
	share = o->window_us / 1000 * (unsigned long long)duty;
	if (o->io_stall_us >= 0 && (unsigned long long)o->io_stall_us > share &&
	    (unsigned long long)o->io_stall_us - share >
	    o->window_us / 1000 * SQ_YIELD_IO_PERMILLE)
		return SQ_YIELD_FLOOR;
	return duty * 2 > SQ_YIELD_FULL ? SQ_YIELD_FULL : duty * 2;
}

/* The number at *p (digits), moved past it; -1 when there is none or it overflows. */
static long long take_num(const char **p, const char *end)
{
	long long v = 0;
	const char *s = *p;

	if (s >= end || *s < '0' || *s > '9')
		return -1;
	while (s < end && *s >= '0' && *s <= '9') {
		if (v > (LLONG_MAX - 9) / 10)
			return -1;
		v = v * 10 + (*s++ - '0');
	}
	*p = s;
	return v;
}

static int take_char(const char **p, const char *end, char c)
{
	if (*p >= end || **p != c)
		return -1;
	(*p)++;
	return 0;
}

static void skip_blanks(const char **p, const char *end)
{
	while (*p < end && **p == ' ')
		(*p)++;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil). */
static long long days_from_civil(long long y, long long m, long long d)
{
	long long era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static int mode_bits(const char *m, unsigned *mode)
{
	static const char types[] = "-dlcbps";
	unsigned v = 0;

	if (strchr(types, m[0]) == NULL || m[0] == '\0')
		return -1;
	for (int i = 0; i < 3; i++) {
		const char *t = m + 1 + 3 * i;
		unsigned shift = (unsigned)(6 - 3 * i);
		char special = i == 2 ? 't' : 's';

		if (t[0] == 'r')
			v |= 4u << shift;
		else if (t[0] != '-')
			return -1;
		if (t[1] == 'w')
			v |= 2u << shift;
		else if (t[1] != '-')
			return -1;
		if (t[2] == 'x' || t[2] == special)
			v |= 1u << shift;
		else if (t[2] != '-' && t[2] != special - 32)
			return -1;
		if (t[2] == special || t[2] == special - 32)
			v |= i == 0 ? 04000u : i == 1 ? 02000u : 01000u;
	}
	*mode = v;
	return 0;
}

/* UID/GID. */
static int take_owner(const char **p, const char *end, long long *uid, long long *gid)
{
	if ((*uid = take_num(p, end)) < 0 || take_char(p, end, '/') < 0 ||
	    (*gid = take_num(p, end)) < 0)
		return -1;
	return 0;
}

/* A file's size, or a device's "MAJOR, MINOR" (its size stays 0). */
static int take_size(const char **p, const char *end, char type, long long *size)
{
	if (type == 'c' || type == 'b') {
		if (take_num(p, end) < 0 || take_char(p, end, ',') < 0)
			return -1;
		skip_blanks(p, end);
		return take_num(p, end) < 0 ? -1 : 0;
	}
	*size = take_num(p, end);
	return *size < 0 ? -1 : 0;
}

/* "YYYY-MM-DD HH:MM " as seconds since the epoch (the listing is in UTC). A squashfs time
 * is 32-bit (year 2106 at most); a year past 9999 is no listing of one, and would
 * overflow the seconds. */
static int take_mtime(const char **p, const char *end, long long *mtime)
{
	long long y, mo, d, h, mi;

	if ((y = take_num(p, end)) < 1970 || y > 9999 || take_char(p, end, '-') < 0 ||
	    (mo = take_num(p, end)) < 1 || mo > 12 || take_char(p, end, '-') < 0 ||
	    (d = take_num(p, end)) < 1 || d > 31 || take_char(p, end, ' ') < 0)
		return -1;
	if ((h = take_num(p, end)) < 0 || h > 23 || take_char(p, end, ':') < 0 ||
	    (mi = take_num(p, end)) < 0 || mi > 59 || take_char(p, end, ' ') < 0)
		return -1;
	*mtime = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60;
	return 0;
}

/* The one " -> " of a symlink's line; NULL when there is none, or more than one (which
 * one would end the name?). */
static const char *link_arrow(const char *s, const char *end)
{
	const char *arrow = NULL;

	for (; s + 4 <= end; s++) {
		if (memcmp(s, " -> ", 4) != 0)
			continue;
		if (arrow != NULL)
			return NULL;
		arrow = s;
	}
	return arrow;
}

/* "squashfs-root[/NAME]", and a symlink's " -> TARGET": where they lie in line. */
static int take_name(const char *line, const char *p, const char *end, struct sq_list_entry *e)
{
	static const char root[] = "squashfs-root";
	const char *name, *arrow;

	if ((size_t)(end - p) < sizeof(root) - 1 || memcmp(p, root, sizeof(root) - 1) != 0)
		return -1;
	p += sizeof(root) - 1;
	if (p < end && take_char(&p, end, '/') < 0)
		return -1;
	name = p;
	if (e->type == 'l') {
		arrow = link_arrow(name, end);
		if (arrow == NULL)
			return -1;
		e->target_off = (size_t)(arrow + 4 - line);
		e->target_len = (size_t)(end - arrow - 4);
		end = arrow;
	}
	e->name_off = (size_t)(name - line);
	e->name_len = (size_t)(end - name);
	return 0;
}

int sq_cache_list_parse(const char *line, size_t len, struct sq_list_entry *e)
{
	const char *p = line, *end = line + len;
	long long uid, gid, size = 0, mtime;
	char modestr[11];

	if (line == NULL || e == NULL || len < 11 || memchr(line, '\0', len) != NULL)
		return -1;
	memset(e, 0, sizeof(*e));
	memcpy(modestr, line, 10);
	modestr[10] = '\0';
	if (mode_bits(modestr, &e->mode) < 0 || line[10] != ' ')
		return -1;
	e->type = line[0];
	p = line + 10;
	skip_blanks(&p, end);
	if (take_owner(&p, end, &uid, &gid) < 0)
		return -1;
	skip_blanks(&p, end);
	if (take_size(&p, end, e->type, &size) < 0)
		return -1;
	skip_blanks(&p, end);
	if (take_mtime(&p, end, &mtime) < 0 || take_name(line, p, end, e) < 0)
		return -1;
	e->uid = (long)uid;
	e->gid = (long)gid;
	e->size = (unsigned long long)size;
	e->mtime = mtime;
	return 0;
}

int sq_cache_name_listable(const char *name, size_t len)
{
	if (name == NULL || len == 0 || name[0] == '#' || name[0] == ' ' || name[len - 1] == ' ')
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];
		if (c < 0x20 || c == 0x7f || c == '\\')
			return 0;
	}
	return 1;
}

int sq_cache_file_complete(const struct sq_list_entry *e, unsigned disk_mode,
			   unsigned long long disk_size, long long disk_mtime, long long first_start)
{
	if (e == NULL || e->type != '-' || (disk_mode & 0170000) != 0100000)
		return 0;
	return (disk_mode & 07777) == e->mode && disk_size == e->size &&
	       disk_mtime >= e->mtime && disk_mtime - e->mtime < 60 && disk_mtime < first_start;
}

int sq_cache_may_fill(const char *job_num_nodes, int max_nodes)
{
	const char *p = job_num_nodes;
	long long n;

	if (max_nodes <= 0 || p == NULL)
		return 1;
	n = take_num(&p, p + strlen(p));
	if (n < 0)
		return *p >= '0' && *p <= '9' ? 0 : 1;   /* overflow: very many; not a number: one */
	return n <= max_nodes;
}

#define HOSTLIST_MAX 1000000L

/* The hosts of one bracket's ranges ("1-3,7"), s at the character after '[': the count,
 * *s past the ']'; -1 when it is not a list of N or N-M with N <= M. */
static long bracket_count(const char **s)
{
	const char *p = *s;
	long total = 0;

	for (;;) {
		char *end;
		long a, b;

		if (*p < '0' || *p > '9')
			return -1;
		a = strtol(p, &end, 10);
		b = a;
		p = end;
		if (*p == '-') {
			if (p[1] < '0' || p[1] > '9')
				return -1;
			b = strtol(p + 1, &end, 10);
			p = end;
		}
		if (b < a || b - a >= HOSTLIST_MAX)
			return -1;
		total += b - a + 1;
		if (total > HOSTLIST_MAX)
			return -1;
		if (*p == ']')
			break;
		if (*p++ != ',')
			return -1;
	}
	*s = p + 1;
	return total;
}

long sq_hostlist_count(const char *list)
{
	const char *p = list;
	long total = 0;

	if (p == NULL || *p == '\0')
		return -1;
	for (;;) {
		long item = 1;
		int chars = 0;

		while (*p != '\0' && *p != ',') {
			if (*p == ']')
				return -1;
			if (*p == '[') {
				long n;

				p++;
				n = bracket_count(&p);
				if (n < 0 || item * n > HOSTLIST_MAX)
					return -1;
				item *= n;
			} else {
				p++;
			}
			chars++;
		}
		if (chars == 0)
			return -1;
		total += item;
		if (total > HOSTLIST_MAX)
			return -1;
		if (*p == '\0')
			return total;
		p++;
	}
}
