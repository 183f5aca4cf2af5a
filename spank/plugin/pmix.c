/* pmix.c: see pmix.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "env.h"
#include "mountapi.h"
#include "pmix.h"
#include "strbuf.h"

/* slurmstepd's own configuration (libslurmfull): weak, so that the plugin still loads
 * where a Slurm build does not export it; Slurm's defaults then. */
extern slurm_conf_t slurm_conf __attribute__((weak));

int sq_pmix_step(char *const job_env[])
{
	const char *type = sq_env_value(job_env, "SLURM_MPI_TYPE");

	return type != NULL && strncmp(type, "pmix", 4) == 0;
}

/* SlurmdSpoolDir with Slurm's %n (node name) and %h (host name) expanded. */
static int spool_dir(char *const job_env[], char *buf, size_t buflen)
{
	const char *conf = &slurm_conf != NULL && slurm_conf.slurmd_spooldir != NULL
				   ? slurm_conf.slurmd_spooldir : "/var/spool/slurmd";
	const char *node = sq_env_value(job_env, "SLURMD_NODENAME");
	char host[256] = "";
	size_t n = 0;

	gethostname(host, sizeof(host) - 1);
	if (node == NULL)
		node = host;
	for (const char *p = conf; *p != '\0' && n + 1 < buflen; p++) {
		const char *put = NULL;
		if (p[0] == '%' && (p[1] == 'n' || p[1] == 'h'))
			put = *++p == 'n' ? node : host;
		n += (size_t)snprintf(buf + n, buflen - n, "%.*s", put ? (int)strlen(put) : 1,
				      put ? put : p);
	}
	return n + 1 < buflen ? 0 : -1;
}

int sq_pmix_spool_bind(char *const job_env[], char *buf, size_t buflen)
{
	char dir[4096];
	struct stat st;

	if (spool_dir(job_env, dir, sizeof(dir)) < 0 || stat(dir, &st) < 0 ||
	    !S_ISDIR(st.st_mode) || strchr(dir, ':') != NULL || strchr(dir, ' ') != NULL)
		return -1;
	return snprintf(buf, buflen, "%s:%s", dir, dir) < (int)buflen ? 0 : -1;
}

/* A directory of the job user's, never a link: what Slurm made for the step, not something
 * another user planted under that name in a shared TmpFS. */
static int users_dir(const char *path, uid_t uid)
{
	struct stat st;

	return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid;
}

/* TmpFS/spmix_appdir_UID_JOB.STEP (Slurm 23.02 and later), or without the UID (before). */
static int appdir(uid_t uid, uint32_t jobid, uint32_t stepid, char *buf, size_t buflen)
{
	const char *tmpfs = &slurm_conf != NULL && slurm_conf.tmp_fs != NULL ? slurm_conf.tmp_fs
									     : "/tmp";

	snprintf(buf, buflen, "%s/spmix_appdir_%u_%u.%u", tmpfs, (unsigned)uid, (unsigned)jobid,
		 (unsigned)stepid);
	if (users_dir(buf, uid))
		return 0;
	snprintf(buf, buflen, "%s/spmix_appdir_%u.%u", tmpfs, (unsigned)jobid, (unsigned)stepid);
	return users_dir(buf, uid) ? 0 : -1;
}

struct ids {
	uid_t uid;
	gid_t gid;
};

/* The child: a copy of the directory's mount taken in the node's namespace, attached in
 * the step's. Exit status: 0, or the step (1-4) that failed with errno written to fd. */
static void bind_child(int ns_mnt, const struct ids *cred, const char *dir, int report)
{
	int step = 1, tree;

	if (seteuid(0) < 0 && geteuid() != 0)
		goto fail;
	step = 2;
	tree = (int)syscall(SYS_open_tree, AT_FDCWD, dir,
			    OPEN_TREE_CLONE | O_CLOEXEC | AT_SYMLINK_NOFOLLOW);
	if (tree < 0)
		goto fail;
	step = 3;
	if (setns(ns_mnt, CLONE_NEWNS) < 0)
		goto fail;
	/* The container's filesystems map the user's ids, not the node's root. */
	setfsgid(cred->gid);
	setfsuid(cred->uid);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		goto fail;
	setfsuid(0);
	step = 4;
	if (syscall(SYS_move_mount, tree, "", AT_FDCWD, dir, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		goto fail;
	_exit(0);
fail:
	if (write(report, &errno, sizeof(errno)) < 0) {
		/* the parent reports the step alone */
	}
	_exit(step);
}

int sq_pmix_bind_appdir(int ns_mnt, uid_t uid, gid_t gid, uint32_t jobid, uint32_t stepid,
			char *err, size_t errlen)
{
	const struct ids cred = { uid, gid };
	static const char *const what[] = { "", "regaining root", "copying its mount",
					     "making its mount point in the container",
					     "mounting it in the container" };
	char dir[4096];
	int fds[2], status = 0, code = 0;
	pid_t pid;

	if (appdir(uid, jobid, stepid, dir, sizeof(dir)) < 0)
		return 0;  /* this Slurm made none: the server's directory is enough */
	if (pipe2(fds, O_CLOEXEC) < 0)
		return sq_errf(err, errlen, "PMIx: cannot bind %s: %s", dir, strerror(errno));
	pid = fork();
	if (pid == 0) {
		close(fds[0]);
		bind_child(ns_mnt, &cred, dir, fds[1]);
	}
	close(fds[1]);
	if (pid < 0) {
		close(fds[0]);
		return sq_errf(err, errlen, "PMIx: cannot bind %s: %s", dir, strerror(errno));
	}
	if (read(fds[0], &code, sizeof(code)) != (ssize_t)sizeof(code))
		code = 0;
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	return sq_errf(err, errlen, "PMIx: cannot bind the step's directory %s into the "
		       "container (%s: %s): MPI_Init will fail; run without --mpi=pmix or "
		       "report this with the kernel version", dir,
		       WIFEXITED(status) && WEXITSTATUS(status) <= 4 ? what[WEXITSTATUS(status)]
								    : "killed",
		       code ? strerror(code) : "unknown error");
}

void sq_pmix_task_env(char *const task_env[], void (*set)(void *ctx, const char *key,
							  const char *value),
		      void *ctx)
{
	static const char *const from_to[][2] = { { "PMIX_PTL_MODULE", "PMIX_MCA_ptl" },
						  { "PMIX_SECURITY_MODE", "PMIX_MCA_psec" },
						  { "PMIX_GDS_MODULE", "PMIX_MCA_gds" } };

	for (size_t i = 0; i < sizeof(from_to) / sizeof(from_to[0]); i++) {
		const char *value = sq_env_value(task_env, from_to[i][0]);
		if (value != NULL && sq_env_value(task_env, from_to[i][1]) == NULL)
			set(ctx, from_to[i][1], value);
	}
}
