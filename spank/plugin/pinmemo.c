/* pinmemo.c: see pinmemo.h. */
#define _GNU_SOURCE
#include "pinmemo.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runcmd.h"
#include "smallio.h"
#include "strbuf.h"

#define SQ_POLICY_FILE "/etc/containers/policy.json"

/* The files whose change makes a memo stale: what steers sqshbuild on this node. */
static const char *const steering[] = {
	"/etc/containers/registries.conf", "/etc/containers/registries.conf.d",
	"/etc/squall/sqshbuild.toml", "/etc/squall/builder",
};

static void stamp(char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(steering) / sizeof(steering[0]); i++) {
		struct stat st;
		int n = stat(steering[i], &st) < 0 ? snprintf(buf + at, len - at, "-;") :
			snprintf(buf + at, len - at, "%lu:%lu:%lld:%lld.%09ld;",
				 (unsigned long)st.st_dev, (unsigned long)st.st_ino,
				 (long long)st.st_size, (long long)st.st_mtim.tv_sec,
				 st.st_mtim.tv_nsec);
		if (n < 0 || (size_t)n >= len - at)
			return;
		at += (size_t)n;
	}
}

/* The memo of (job, text): DIR/JOBID-HASH, the job id the key's last part (so the epilog
 * finds a job's memos by their names). */
static int memo_path(const char *dir, const char *job, const char *hash, char *out,
		     size_t len)
{
	const char *dash = strrchr(job, '-');
	char *end = NULL;
	unsigned long jobid;
	int n;

	if (dash == NULL || strlen(hash) != 16 || strspn(hash, "0123456789abcdef") != 16)
		return -1;
	errno = 0;
	jobid = strtoul(dash + 1, &end, 10);
	if (errno != 0 || end == dash + 1 || *end != '\0' || jobid > UINT32_MAX)
		return -1;
	n = snprintf(out, len, "%s/%u-%s", dir, (unsigned)jobid, hash);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* The memo's text: what it is for, then what it says. */
static int memo_text(const char *job, const char *text, const char *path, const char *identity,
		     char *out, size_t len)
{
	char st[1024];
	int n;

	stamp(st, sizeof(st));
	n = snprintf(out, len, "job %s\nref %s\nstamp %s\nidentity %s\npath %s\n", job, text, st,
		     identity, path);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* Read the memo at path if it is root's, a regular file and not a link: heap text. */
static char *read_memo(const char *path)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	char *text;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 ||
	    (st.st_mode & 0077) != 0 || st.st_size > 16384) {
		close(fd);
		return NULL;
	}
	text = sq_read_all(fd, NULL);
	close(fd);
	return text;
}

int sq_pinmemo_find(const char *dir, const char *job, const char *text, const char *hash,
		    char **path, char identity[17])
{
	char memo[4096], want[8192];
	const char *p, *idline;
	char *have;
	uid_t back;
	int found = 0;

	*path = NULL;
	if (job == NULL || job[0] == '\0' || access(SQ_POLICY_FILE, F_OK) == 0 ||
	    memo_path(dir, job, hash, memo, sizeof(memo)) < 0)
		return 0;
	back = sq_thread_root();
	have = read_memo(memo);
	sq_thread_back(back);
	if (have == NULL)
		return 0;
	p = strstr(have, "\npath ");
	idline = strstr(have, "\nidentity ");
	/* The memo must say what the same job, text and settings would say now. */
	if (p != NULL && idline != NULL && strlen(p + 6) > 1 &&
	    memo_text(job, text, "", "", want, sizeof(want)) == 0 &&
	    strncmp(have, want, (size_t)(strstr(want, "\nidentity ") - want)) == 0 &&
	    sscanf(idline + 10, "%16[0-9a-f]", identity) == 1 && strlen(identity) == 16) {
		*path = strndup(p + 6, strlen(p + 6) - 1);
		found = *path != NULL;
	}
	free(have);
	return found;
}

void sq_pinmemo_keep(const char *dir, const char *job, const char *text, const char *hash,
		     const char *path, const char *identity)
{
	char memo[4096], body[8192];
	uid_t back;

	if (job == NULL || job[0] == '\0' || memo_path(dir, job, hash, memo, sizeof(memo)) < 0 ||
	    memo_text(job, text, path, identity, body, sizeof(body)) < 0)
		return;
	back = sq_thread_root();
	if (geteuid() == 0) {
		(void)mkdir("/run/squall", 0755);
		if (mkdir(dir, 0700) == 0 || errno == EEXIST) {
			struct stat st;
			if (lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 &&
			    (st.st_mode & 0077) == 0)
				(void)sq_write_record(memo, body);
		}
	}
	sq_thread_back(back);
}

void sq_pinmemo_drop_job(const char *dir, uint32_t jobid)
{
	char prefix[16];
	struct dirent *d;
	DIR *dp = opendir(dir);
	size_t n;

	if (dp == NULL)
		return;
	n = (size_t)snprintf(prefix, sizeof(prefix), "%u-", (unsigned)jobid);
	while ((d = readdir(dp)) != NULL)
		if (strncmp(d->d_name, prefix, n) == 0)
			(void)unlinkat(dirfd(dp), d->d_name, 0);
	closedir(dp);
}
