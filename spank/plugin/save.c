/* save.c: see save.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "save.h"
#include "strbuf.h"

/* rename or unlink as the user, in a child, so root never follows the user's paths. */
static int as_user(const struct sq_cred *cred, const char *from, const char *to)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		if ((cred->groups && setgroups((size_t)cred->ngroups, cred->groups) < 0) ||
		    setresgid(cred->gid, cred->gid, cred->gid) < 0 ||
		    setresuid(cred->uid, cred->uid, cred->uid) < 0)
			_exit(126);
		_exit((to ? rename(from, to) : unlink(from)) == 0 ? 0 : 1);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

int sq_save_check(const char *path, char *err, size_t errlen)
{
	char dir_buf[PATH_MAX];
	const char *dir;
	struct stat st;

	snprintf(dir_buf, sizeof(dir_buf), "%s", path);
	dir = dirname(dir_buf);
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return sq_errf(err, errlen, "--container-save=%s: directory %s does not exist on "
				"this node: create it first (the image is written there at the step's "
				"end)", path, dir);
	if (access(dir, W_OK | X_OK) < 0)
		return sq_errf(err, errlen, "--container-save=%s: directory %s is not writable by "
				"the job user: pick a directory you can write", path, dir);
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return sq_errf(err, errlen, "--container-save=%s: is a directory: give a file path "
				"(e.g. %s/saved.sqsh)", path, path);
	return 0;
}

int sq_save_export(const struct sq_runtime *rt, const char *container, const char *path,
		   uint32_t jobid, uint32_t stepid, char *err, size_t errlen)
{
	char dir_buf[PATH_MAX], base_buf[PATH_MAX], tmp[PATH_MAX + 64];
	const char *args[6];

	snprintf(dir_buf, sizeof(dir_buf), "%s", path);
	snprintf(base_buf, sizeof(base_buf), "%s", path);
	snprintf(tmp, sizeof(tmp), "%s/.%s.squall-%u.%u.tmp", dirname(dir_buf), basename(base_buf),
		 (unsigned)jobid, (unsigned)stepid);
	args[0] = "export";
	args[1] = "-f";
	args[2] = "-o";
	args[3] = tmp;
	args[4] = container;
	args[5] = NULL;
	if (sq_enroot_call(rt, "enroot export", args, NULL, err, errlen) < 0) {
		as_user(rt->cred, tmp, NULL);
		return -1;
	}
	if (as_user(rt->cred, tmp, path) < 0) {
		sq_errf(err, errlen, "cannot move the saved image into place at %s", path);
		as_user(rt->cred, tmp, NULL);
		return -1;
	}
	return 0;
}
