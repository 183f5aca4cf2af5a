/* filepolicy.c: see filepolicy.h. */
#define _GNU_SOURCE
#include "filepolicy.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runcmd.h"
#include "smallio.h"
#include "sqshpolicy.h"
#include "strbuf.h"

#define SQ_POLICY_FILE "/etc/containers/policy.json"
#define SQ_POLICY_COMPILED "/run/squall/policy-sqsh"
#define SQ_COMPILED_MAX (1 << 20)

/* The compiled policy (heap), or NULL when it is missing or not to be trusted: not a
 * regular file of root's that only root may write. */
static char *read_compiled(void)
{
	struct stat st;
	char *text = NULL;
	int fd = open(SQ_POLICY_COMPILED, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 &&
	    !(st.st_mode & 022) && st.st_size <= SQ_COMPILED_MAX)
		text = sq_read_all(fd, NULL);
	close(fd);
	return text;
}

/* `sqshbuild policy compile` as root. 0, or -1 with its one line in err. */
static int compile(const char *sqshbuild, char *err, size_t errlen)
{
	static gid_t root_group[1] = { 0 };
	const struct sq_cred root = { 0, 0, root_group, 1 };
	char *argv[] = { (char *)sqshbuild, "policy", "compile", NULL };
	char *envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", NULL };
	const struct sq_spawn_opts o = { "/", 022, NULL, 0, NULL, NULL, NULL };
	struct sq_child child;
	char line[1024], why[64];
	int status;

	if (sq_run_opts(sqshbuild, argv, envp, &root, &o, &status, &child, err, errlen) < 0)
		return -1;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		sq_child_close(&child);
		return 0;
	}
	sq_capture_tail(child.err_fd, 1, line, sizeof(line));
	sq_child_close(&child);
	sq_status_text(status, why, sizeof(why));
	return sq_errf(err, errlen, "the site policy %s cannot be used (sqshbuild policy "
		       "compile: %s): %s", SQ_POLICY_FILE, why, line[0] ? line : "no error line");
}

/* The compiled policy for stamp (heap): read, else compiled first. NULL with err. */
static char *compiled_for(const char *stamp, const char *sqshbuild, char *err, size_t errlen)
{
	char *text = read_compiled();

	if (text != NULL && sq_sqshpolicy_fresh(text, stamp))
		return text;
	free(text);
	if (compile(sqshbuild, err, errlen) < 0)
		return NULL;
	text = read_compiled();
	if (text != NULL && sq_sqshpolicy_fresh(text, stamp))
		return text;
	free(text);
	sq_errf(err, errlen, "the site policy %s changed while it was compiled into %s: start "
		"the step again", SQ_POLICY_FILE, SQ_POLICY_COMPILED);
	return NULL;
}

/* The file at real (no link in it), or a directory between it and the scope that accepted
 * it, that anyone may write: whoever wrote a file there would have it run as accepted.
 * 1 with its path and mode, 0 none, -1 a stat failed (errno). */
static int open_to_all(const char *real, const char *scope, char *which, unsigned int *mode)
{
	size_t stop = strlen(scope);
	struct stat st;
	char *slash;

	snprintf(which, PATH_MAX, "%s", real);
	while (strlen(which) > stop) {
		if (stat(which, &st) < 0)
			return -1;
		if (st.st_mode & S_IWOTH) {
			*mode = (unsigned int)st.st_mode & 07777;
			return 1;
		}
		slash = strrchr(which, '/');
		if (slash == NULL || slash == which)
			break;
		*slash = '\0';
	}
	return 0;
}

/* 0, or -1 with err when the accepting scope holds the file through a place anyone may
 * write. */
static int check_writers(const char *shown, const char *real,
			 const struct sq_sqshpolicy_verdict *v, char *err, size_t errlen)
{
	char which[PATH_MAX];
	unsigned int mode = 0;
	int rc;

	if (v->where != SQ_SQSHPOL_SCOPE)
		return 0;
	rc = open_to_all(real, strcmp(v->scope, "/") == 0 ? "" : v->scope, which, &mode);
	if (rc < 0)
		return sq_errf(err, errlen, "the site policy %s cannot check %s: %s: %s",
			       SQ_POLICY_FILE, shown, which, strerror(errno));
	if (rc == 0)
		return 0;
	return sq_errf(err, errlen, "the site policy %s refuses %s: the scope \"%s\" of "
		       "transport squall-sqsh accepts it, but %s may be written by anyone (mode "
		       "%04o): keep images where only trusted accounts can write, or ask the "
		       "site's administrators (docs/registries.md)", SQ_POLICY_FILE, shown,
		       v->scope, which, mode);
}

/* 1 accepted (judged), 0 not judged, -1 refused with err. */
static int decide(const char *text, const char *path, char real[PATH_MAX], char *err,
		  size_t errlen)
{
	struct sq_sqshpolicy_verdict v;
	char shown[2 * PATH_MAX + 16];

	if (realpath(path, real) == NULL)
		return sq_errf(err, errlen, "--container-image=%s: cannot find its real path for "
			       "the site policy: %s", path, strerror(errno));
	if (sq_sqshpolicy_decide(text, real, &v) < 0)
		return sq_errf(err, errlen, "%s is not a compiled policy: remove it (the next "
			       "step compiles %s again)", SQ_POLICY_COMPILED, SQ_POLICY_FILE);
	if (strcmp(real, path) == 0)
		snprintf(shown, sizeof(shown), "%s", path);
	else
		snprintf(shown, sizeof(shown), "%s (really %s)", path, real);
	if (v.verdict == SQ_SQSHPOL_ACCEPT)
		return check_writers(shown, real, &v, err, errlen) < 0
			? -1 : v.where != SQ_SQSHPOL_UNJUDGED;
	if (sq_sqshpolicy_refusal(SQ_POLICY_FILE, shown, &v, err, errlen) < 0)
		return sq_errf(err, errlen, "the site policy %s refuses %s", SQ_POLICY_FILE,
			       real);
	return -1;
}

int sq_filepolicy_check(const char *path, const char *sqshbuild, char real[PATH_MAX],
			char *err, size_t errlen)
{
	struct stat st;
	char stamp[128];
	char *text;
	int rc;

	if (stat(SQ_POLICY_FILE, &st) < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		return sq_errf(err, errlen, "the site policy %s cannot be read: %s: make it "
			       "readable by everyone (mode 0644)", SQ_POLICY_FILE,
			       strerror(errno));
	}
	snprintf(stamp, sizeof(stamp), "%ju:%ju:%jd:%jd", (uintmax_t)st.st_dev,
		 (uintmax_t)st.st_ino, (intmax_t)st.st_size,
		 (intmax_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
	text = compiled_for(stamp, sqshbuild, err, errlen);
	if (text == NULL)
		return -1;
	rc = decide(text, path, real, err, errlen);
	free(text);
	return rc;
}
