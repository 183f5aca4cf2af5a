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
#include "mountpoint.h"
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

/* SlurmdSpoolDir/pmix.JOB.STEP: the step's PMIX_SERVER_TMPDIR. */
static int server_dir(char *const job_env[], uid_t uid, uint32_t jobid, uint32_t stepid,
		      char *buf, size_t buflen)
{
	char spool[4096];

	if (spool_dir(job_env, spool, sizeof(spool)) < 0 ||
	    (size_t)snprintf(buf, buflen, "%s/pmix.%u.%u", spool, (unsigned)jobid,
			     (unsigned)stepid) >= buflen)
		return -1;
	return users_dir(buf, uid) ? 0 : -1;
}

struct ids {
	uid_t uid;
	gid_t gid;
};

/* One directory's mount, copied in the node's namespace, attached in ns_mnt at its own
 * path. 0 ok, or the phase (2-4) that failed with errno set. Runs as root, creates as the
 * user. */
static int bind_one(int ns_mnt, const struct ids *cred, const char *dir)
{
	int tree = (int)syscall(SYS_open_tree, AT_FDCWD, dir,
				OPEN_TREE_CLONE | O_CLOEXEC | AT_SYMLINK_NOFOLLOW);

	if (tree < 0)
		return 2;
	if (setns(ns_mnt, CLONE_NEWNS) < 0)
		return 3;
	/* The container's filesystems map the user's ids, not the node's root. */
	setfsgid(cred->gid);
	if (sq_mount_point_make(dir, cred->uid) < 0)
		return 3;
	setfsuid(0);
	if (syscall(SYS_move_mount, tree, "", AT_FDCWD, dir, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return 4;
	return 0;
}

/* The child: each directory's mount taken in the node's namespace, attached in the
 * step's. Exit status: 0, or 10 * (the directory's index) + the phase (1-4) that failed,
 * with errno written to report. */
static void bind_child(int ns_mnt, const struct ids *cred, char dirs[][4096], int n,
		       int report)
{
	int host = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC), step = 1, i = 0;

	if (seteuid(0) < 0 && geteuid() != 0)
		goto fail;
	for (i = 0; i < n; i++) {
		step = bind_one(ns_mnt, cred, dirs[i]);
		if (step != 0)
			goto fail;
		/* Back to the node's namespace for the next directory's copy. */
		if (i + 1 < n && (host < 0 || setns(host, CLONE_NEWNS) < 0)) {
			step = 2;
			i++;
			goto fail;
		}
	}
	_exit(0);
fail:
	if (write(report, &errno, sizeof(errno)) < 0) {
		/* the parent reports the step alone */
	}
	_exit(10 * i + step);
}

int sq_pmix_bind_dirs(int ns_mnt, char *const job_env[], uid_t uid, gid_t gid,
		      uint32_t jobid, uint32_t stepid, char *err, size_t errlen)
{
	const struct ids cred = { uid, gid };
	static const char *const what[] = { "", "regaining root", "copying its mount",
					     "making its mount point in the container",
					     "mounting it in the container" };
	char dirs[2][4096];
	int fds[2], status = 0, code = 0, n = 0, app, which, phase;
	pid_t pid;

	/* Those this Slurm made: the application's (none before 23.02's shared-memory
	 * store), then the server's. */
	if (appdir(uid, jobid, stepid, dirs[n], sizeof(dirs[n])) == 0)
		n++;
	app = n;
	if (server_dir(job_env, uid, jobid, stepid, dirs[n], sizeof(dirs[n])) == 0)
		n++;
	if (n == 0)
		return 0;
	if (pipe2(fds, O_CLOEXEC) < 0)
		return sq_errf(err, errlen, "PMIx: cannot bind %s: %s", dirs[0], strerror(errno));
	pid = fork();
	if (pid == 0) {
		close(fds[0]);
		bind_child(ns_mnt, &cred, dirs, n, fds[1]);
	}
	close(fds[1]);
	if (pid < 0) {
		close(fds[0]);
		return sq_errf(err, errlen, "PMIx: cannot bind %s: %s", dirs[0], strerror(errno));
	}
	if (read(fds[0], &code, sizeof(code)) != (ssize_t)sizeof(code))
		code = 0;
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	which = WIFEXITED(status) ? WEXITSTATUS(status) / 10 : 0;
	phase = WIFEXITED(status) ? WEXITSTATUS(status) % 10 : 0;
	if (which >= n)
		which = 0;
	/* Said as it is, measured with Open MPI 5.0.7 (PMIx 5): a client reaches the server
	 * through PMIX_SERVER_URI* (TCP) and MPI_Init works without the server's directory,
	 * but fails without the application's, whose shared-memory store it opens (gds
	 * shmem2). So only the application's is warned about. */
	sq_errf(err, errlen, "PMIx: cannot bind the step's %s directory %s into the container "
		"(%s: %s)%s", which < app ? "application" : "server", dirs[which],
		phase >= 1 && phase <= 4 ? what[phase] : "killed",
		code ? strerror(code) : "unknown error",
		which < app ? ": MPI_Init fails in a client that opens PMIx's shared-memory "
			      "store there (Open MPI 5: PMIX_ERR_FILE_OPEN_FAILURE in "
			      "gds_shmem2); run without --mpi=pmix or report this with the "
			      "kernel version" : "");
	return which < app ? -1 : -2;
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
