/* stepcg.c: see stepcg.h. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "stepcg.h"

/* A copy of the line of text that starts at p (without its newline) into buf. */
static const char *line_at(const char *p, char *buf, size_t buflen)
{
	size_t n = strcspn(p, "\n");

	if (n >= buflen)
		n = buflen - 1;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return p[strcspn(p, "\n")] ? p + strcspn(p, "\n") + 1 : NULL;
}

/* "freezer" is one of the comma-separated names in list. */
static int has_freezer(const char *list)
{
	const char *p = strstr(list, "freezer");

	for (; p != NULL; p = strstr(p + 1, "freezer")) {
		char after = p[strlen("freezer")];
		if ((p == list || p[-1] == ',' || p[-1] == ' ') &&
		    (after == '\0' || after == ',' || after == ' '))
			return 1;
	}
	return 0;
}

/* The freezer path of /proc/self/cgroup ("N:freezer:/path"), or 0. */
static int freezer_path(const char *cgroup, char *path, size_t pathlen)
{
	char line[4096];

	for (const char *p = cgroup; p != NULL && *p;) {
		char *c1, *c2;
		p = line_at(p, line, sizeof(line));
		c1 = strchr(line, ':');
		c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (c2 == NULL)
			continue;
		*c2 = '\0';
		if (has_freezer(c1 + 1)) {
			snprintf(path, pathlen, "%s", c2 + 1);
			return 1;
		}
	}
	return 0;
}

/* The root and mount point of the freezer hierarchy in mountinfo, or 0. Fields: ID PARENT
 * MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS. */
static int freezer_mount(const char *mountinfo, char *root, char *point, size_t len)
{
	char line[4096], r[1024], m[1024], fstype[64], super[1024];

	for (const char *p = mountinfo; p != NULL && *p;) {
		const char *dash;
		p = line_at(p, line, sizeof(line));
		dash = strstr(line, " - ");
		if (dash == NULL || sscanf(line, "%*s %*s %*s %1023s %1023s", r, m) != 2 ||
		    sscanf(dash + 3, "%63s %*s %1023s", fstype, super) != 2)
			continue;
		if (strcmp(fstype, "cgroup") == 0 && has_freezer(super)) {
			snprintf(root, len, "%s", r);
			snprintf(point, len, "%s", m);
			return 1;
		}
	}
	return 0;
}

/* path ends in "/job_<digits>". */
static int is_job(const char *path)
{
	const char *last = strrchr(path, '/');

	if (last == NULL || strncmp(last, "/job_", 5) != 0 || last[5] == '\0')
		return 0;
	return strspn(last + 5, "0123456789") == strlen(last + 5);
}

int sq_stepcg_procs(const char *cgroup, const char *mountinfo, const char *step, char *out,
		    size_t outlen)
{
	char path[4096], root[1024], point[1024];
	size_t rootlen;
	const char *rest;
	int n;

	if (outlen == 0)
		return -1;
	out[0] = '\0';
	if (cgroup == NULL || mountinfo == NULL || step == NULL || strchr(step, '/') ||
	    !freezer_path(cgroup, path, sizeof(path)) || !is_job(path) ||
	    !freezer_mount(mountinfo, root, point, sizeof(root)))
		return 0;
	/* the part of the path below the mount's root ("/" mounts the whole hierarchy) */
	rootlen = strcmp(root, "/") == 0 ? 0 : strlen(root);
	if (strncmp(path, root, rootlen) != 0 || (path[rootlen] != '/' && path[rootlen] != '\0'))
		return 0;
	rest = path + rootlen;
	n = snprintf(out, outlen, "%s%s/%s/cgroup.procs", point, rest, step);
	if (n < 0 || (size_t)n >= outlen) {
		out[0] = '\0';
		return -1;
	}
	return 0;
}
