/* procstat.c: see procstat.h. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "procstat.h"

#define RECORD_TAG "squall-running 1 "

/* One unsigned decimal number at s[*i..len), at most 20 digits; advances *i. */
static int read_number(const char *s, size_t len, size_t *i, unsigned long long *out)
{
	unsigned long long v = 0;
	size_t start = *i;

	while (*i < len && s[*i] >= '0' && s[*i] <= '9') {
		unsigned d = (unsigned)(s[*i] - '0');
		if (v > (ULLONG_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
		(*i)++;
	}
	if (*i == start)
		return -1;
	*out = v;
	return 0;
}

int sq_procstat_parse(const char *text, size_t len, char *state, unsigned long long *starttime)
{
	size_t i, paren = len;
	int field;

	for (i = len; i > 0; i--)
		if (text[i - 1] == ')') {
			paren = i - 1;
			break;
		}
	if (paren == len || paren + 3 >= len || text[paren + 1] != ' ')
		return -1;
	*state = text[paren + 2];
	if (*state == ' ' || *state == '\0')
		return -1;
	/* Field 3 is the state; skip to field 22, one space between fields. */
	i = paren + 3;
	for (field = 3; field < 22; field++) {
		while (i < len && text[i] != ' ')
			i++;
		if (i >= len)
			return -1;
		i++;
	}
	return read_number(text, len, &i, starttime);
}

ssize_t sq_procstat_text(long pid, char *buf, size_t len)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, len);
	close(fd);
	return n > 0 ? n : -1;
}

int sq_procstat_read(long pid, char *state, unsigned long long *starttime)
{
	char buf[1024];
	ssize_t n = sq_procstat_text(pid, buf, sizeof(buf));

	return n > 0 ? sq_procstat_parse(buf, (size_t)n, state, starttime) : -1;
}

int sq_running_format(long pid, unsigned long long starttime, char *out, size_t outlen)
{
	int n = snprintf(out, outlen, RECORD_TAG "%ld %llu\n", pid, starttime);
	return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

/* " PID START" at text[*i..len): PID in 1..INT_MAX. */
static int read_pair(const char *text, size_t len, size_t *i, unsigned long long *pid,
		     unsigned long long *start)
{
	if (*i >= len || text[(*i)++] != ' ' || read_number(text, len, i, pid) < 0 || *pid < 1 ||
	    *pid > INT_MAX)
		return -1;
	if (*i >= len || text[(*i)++] != ' ' || read_number(text, len, i, start) < 0)
		return -1;
	return 0;
}

int sq_running_parse_ns(const char *text, size_t len, long *pid, unsigned long long *starttime,
			long *nspid, unsigned long long *nsstart)
{
	size_t tag = strlen(RECORD_TAG), i = tag - 1;   /* from the space after the tag */
	unsigned long long p, np = 0, ns = 0, s;

	if (len < tag || memcmp(text, RECORD_TAG, tag) != 0)
		return -1;
	if (read_pair(text, len, &i, &p, &s) < 0)
		return -1;
	if (i < len && text[i] == ' ' && read_pair(text, len, &i, &np, &ns) < 0)
		return -1;
	if (i < len && text[i] == '\n')
		i++;
	if (i != len)
		return -1;
	*pid = (long)p;
	*starttime = s;
	*nspid = (long)np;
	*nsstart = ns;
	return 0;
}

int sq_running_parse(const char *text, size_t len, long *pid, unsigned long long *starttime)
{
	unsigned long long ns;
	long nspid;

	if (sq_running_parse_ns(text, len, pid, starttime, &nspid, &ns) < 0 || nspid != 0)
		return -1;
	return 0;
}

int sq_running_format_ns(long pid, unsigned long long starttime, long nspid,
			 unsigned long long nsstart, char *out, size_t outlen)
{
	int n;

	if (nspid == 0)
		return sq_running_format(pid, starttime, out, outlen);
	n = snprintf(out, outlen, RECORD_TAG "%ld %llu %ld %llu\n", pid, starttime, nspid,
		     nsstart);
	return n < 0 || (size_t)n >= outlen ? -1 : 0;
}
