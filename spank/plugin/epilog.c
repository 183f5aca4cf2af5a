/*
 * epilog.c: slurmd's job epilog, as root (epilog.h): end the containers the job's steps
 * could not stop, sweep their records, and remove the job's named containers
 * (container_scope=job).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "enroot.h"
#include "epilog.h"
#include "extracted_name.h"
#include "records.h"
#include "report.h"
#include "named.h"
#include "prestart_mark.h"
#include "running.h"
#include "safeopen.h"
#include "stepconf.h"
#include "strbuf.h"

/* The user's runtime directory for the job epilog, as root: runtime_path (root's) and
 * runtime_path/UID opened O_NOFOLLOW|O_DIRECTORY and checked; -1 when there is none (no
 * container step ran here) or it is refused (a line in slurmd's log). */
static int epilog_runtime_dir(const struct sq_config *cfg, uint32_t jobid, uid_t uid)
{
	char err[SQ_ERR_LEN], name[16];
	int top, fd;

	top = sq_dir_open_checked(AT_FDCWD, cfg->runtime_path, -1, err, sizeof(err));
	if (top < 0) {
		if (errno != ENOENT)
			slurm_error("squall: job %u: %s (plugstack.conf runtime_path)",
				    (unsigned)jobid, err);
		return -1;
	}
	snprintf(name, sizeof(name), "%u", (unsigned)uid);
	fd = sq_dir_open_checked(top, name, (long)uid, err, sizeof(err));
	if (fd < 0 && errno != ENOENT)
		slurm_error("squall: job %u: %s/%s", (unsigned)jobid, cfg->runtime_path, err);
	close(top);
	return fd;
}

/* How long the epilog waits, in all, for the job's kept containers that are still being
 * started (their locks held): a job prolog's start (prestart.h) can outrun a short job. */
#define EPILOG_START_WAIT_MS 30000

/* 1 when name is kept-JOBID-KEY.lock (kept.c's lock of one of the job's containers). */
static int job_kept_lock(const char *name, uint32_t jobid)
{
	char prefix[32];
	size_t n = strlen(name);

	snprintf(prefix, sizeof(prefix), "kept-%u-", (unsigned)jobid);
	return strncmp(name, prefix, strlen(prefix)) == 0 && n > 5 &&
	       strcmp(name + n - 5, ".lock") == 0;
}

/* Wait until no start of the job's kept containers holds its lock: the starter records
 * its keeper before it lets go (kept.h), so the sweep below then finds it. Only the
 * user's regular files, opened without following links or blocking; the user can make
 * the epilog wait, not for longer than EPILOG_START_WAIT_MS. */
static void epilog_wait_starts(int rtfd, uint32_t jobid, uid_t uid)
{
	double deadline = sq_now() + EPILOG_START_WAIT_MS / 1000.0;
	int dfd = dup(rtfd);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	struct dirent *e;

	if (d == NULL) {
		if (dfd >= 0)
			close(dfd);
		return;
	}
	while ((e = readdir(d)) != NULL) {
		struct stat st;
		int fd;

		if (!job_kept_lock(e->d_name, jobid))
			continue;
		fd = openat(rtfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == uid) {
			while (flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK &&
			       sq_now() < deadline)
				usleep(50 * 1000);
		}
		close(fd);
	}
	closedir(d);
}

/* A container whose step could not stop it (slurmstepd killed, and its keeper with it)
 * is ended here, from the records its steps left (records.h), and the records a killed
 * slurmstepd could not remove go (running.h). */
static void epilog_end_containers(const struct sq_config *cfg, int dirfd_, uint32_t jobid,
				  uid_t uid)
{
	int n;

	epilog_wait_starts(dirfd_, jobid, uid);
	n = sq_records_sweep_job(dirfd_, jobid, uid);
	if (n > 0)
		slurm_info("squall: job %u: ended %d container(s) its steps left running",
			   (unsigned)jobid, n);
	sq_running_sweep_job(dirfd_, jobid, cfg->container_scope == SQ_SCOPE_JOB);
}

/* The runtime's environment for the user's named containers, in the caller's buffers. */
struct epilog_env {
	char home[PATH_MAX + 8], user[300], runtime[PATH_MAX + 32], path[PATH_MAX * 2 + 16];
	char *envp[5];
};

static void epilog_env_fill(struct epilog_env *e, const struct passwd *pw, const char *dir,
			    const char *enroot)
{
	snprintf(e->home, sizeof(e->home), "HOME=%s", pw->pw_dir);
	snprintf(e->user, sizeof(e->user), "USER=%s", pw->pw_name);
	snprintf(e->runtime, sizeof(e->runtime), "ENROOT_RUNTIME_PATH=%s/enroot", dir);
	snprintf(e->path, sizeof(e->path), "PATH=");
	if (sq_runtime_path(enroot, e->path + 5, sizeof(e->path) - 5) < 0)
		snprintf(e->path, sizeof(e->path), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:"
			 "/usr/bin:/sbin:/bin");
	e->envp[0] = e->path;
	e->envp[1] = e->home;
	e->envp[2] = e->user;
	e->envp[3] = e->runtime;
	e->envp[4] = NULL;
}

/* Remove the job's named containers, pyxis_JOBID_*, as the user (container_scope=job),
 * then the marker. */
static void epilog_remove_named(const struct sq_config *cfg, int rtfd, const char *marker,
				uint32_t jobid, uid_t uid)
{
	char prefix[64], err[SQ_ERR_LEN], buf[4096], dir[PATH_MAX];
	char *enroot = NULL;
	struct passwd pw, *res = NULL;
	struct epilog_env env;
	struct sq_cred cred;
	struct sq_runtime rt;

	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) != 0 || res == NULL ||
	    sq_cred_init(&cred, uid, pw.pw_gid, err, sizeof(err)) < 0) {
		slurm_error("squall: job %u: cannot look up user %u to remove its containers",
			    (unsigned)jobid, (unsigned)uid);
		return;
	}
	if (cfg->enroot != NULL)
		enroot = strdup(cfg->enroot);
	else if (sq_find_enroot(&enroot, err, sizeof(err)) < 0)
		slurm_error("squall: job %u: %s", (unsigned)jobid, err);
	snprintf(dir, sizeof(dir), "%s/%u", cfg->runtime_path, (unsigned)uid);
	epilog_env_fill(&env, &pw, dir, enroot);
	rt = (struct sq_runtime){ enroot, env.envp, &cred };
	snprintf(prefix, sizeof(prefix), "pyxis_%u_", (unsigned)jobid);
	if (enroot != NULL && sq_named_remove_prefix(&rt, dir, prefix, err, sizeof(err)) < 0)
		slurm_error("squall: job %u: removing its containers: %s", (unsigned)jobid, err);
	unlinkat(rtfd, marker, 0);
	free(enroot);
	sq_cred_free(&cred);
}

void sq_epilog_run(const struct sq_config *cfg, spank_t sp)
{
	char marker[PATH_MAX];
	struct stat mst;
	uint32_t jobid;
	uid_t uid;
	int rtfd;

	if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS) {
		slurm_error("squall: job epilog: no job id or user id from Slurm");
		return;
	}
	/* Copies a step sent to nodes whose extraction did not take them (shared_copy.h),
	 * and the copies of every user's ended jobs that slurmd wrote after their epilog. */
	if (cfg->local_cache_gb > 0) {
		sq_extracted_drop_copies(cfg->local_cache, (long)uid, jobid);
		sq_extracted_sweep_copies(cfg->local_cache);
	}
	rtfd = epilog_runtime_dir(cfg, jobid, uid);
	if (rtfd < 0)
		return;
	epilog_end_containers(cfg, rtfd, jobid, uid);
	snprintf(marker, sizeof(marker), "job%u." SQ_PRESTART_MARK, (unsigned)jobid);
	unlinkat(rtfd, marker, 0);
	/* Only nodes where a step left the marker run the runtime at all. */
	snprintf(marker, sizeof(marker), "job%u.names", (unsigned)jobid);
	if (cfg->container_scope == SQ_SCOPE_JOB &&
	    fstatat(rtfd, marker, &mst, AT_SYMLINK_NOFOLLOW) == 0)
		epilog_remove_named(cfg, rtfd, marker, jobid, uid);
	close(rtfd);
}
