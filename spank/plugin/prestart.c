/* prestart.c: see prestart.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "env.h"
#include "imageref.h"
#include "nodecache.h"
#include "options.h"
#include "prestart.h"
#include "prestart_env.h"
#include "report.h"
#include "step.h"
#include "stepconf.h"

/* The job's squall flags as sbatch/salloc gave them (the job script context's view of
 * them): 0 ok, -1 with err. */
static int read_job_flags(spank_t sp, struct sq_opts *o, char *err, size_t errlen)
{
	for (size_t i = 0; i < sq_opt_flag_count(); i++) {
		const struct sq_flag *f = sq_opt_flag(i);
		struct spank_option opt = { (char *)f->name, (char *)f->arg_info, (char *)f->help,
					    f->has_arg, f->id, NULL };
		char *arg = NULL;

		if (spank_option_getopt(sp, &opt, &arg) != ESPANK_SUCCESS)
			continue;
		if (sq_opt_set(o, f->id, f->has_arg && arg != NULL && *arg ? arg : NULL,
			       SQ_SRC_CLI, err, errlen) < 0)
			return -1;
	}
	return 0;
}

/* The prolog's start as the container's would be by the job's first step: the image is
 * the prestart one, no named container. */
static int prestart_flags(struct sq_opts *o)
{
	free(o->image);
	o->image = strdup(o->prestart);
	free(o->name);
	o->name = NULL;
	return o->image != NULL ? 0 : -1;
}

/* The job's node count from the prolog's SLURM_NODELIST ("" when it is not one). */
static void job_nodes(char *out, size_t outlen)
{
	const char *list = getenv("SLURM_JOB_NODELIST");
	long n;

	if (list == NULL)
		list = getenv("SLURM_NODELIST");
	n = sq_hostlist_count(list);
	if (n > 0)
		snprintf(out, outlen, "%ld", n);
	else
		out[0] = '\0';
}

/* 1 when the image is a squashfs file (no import, no pin, nothing to say on srun's
 * terminal). */
static int file_image(const char *image)
{
	struct sq_image_ref ref;
	char err[256];
	int file = sq_imgref_parse(image, &ref, err, sizeof(err)) == 0 &&
		   ref.kind == SQ_IMAGE_FILE;

	sq_imgref_free(&ref);
	return file;
}

/* A job srun allocated for a step that keeps its container for the job (client.c): that
 * image is the one to start, when the site said so (plugstack prestart_srun_jobs=1),
 * unless
 * - it is not a squashfs file: a registry image's import, its pin and their lines (Pyxis's
 *   import lines, the importer's errors, the builder's refusals) are the step's to say on
 *   srun's terminal, not the prolog's in slurmd's log;
 * - the step sends the image to its nodes itself (2 to local_cache_max_nodes nodes with the
 *   node-local cache on: the image read once from /fsx for them all, kept.c; the prolog has
 *   no step to send with).
 * The step's other conditions (container_reuse, the entrypoint) are sq_step_prestart's,
 * quiet. */
static int srun_job(const struct sq_config *cfg, struct sq_opts *o)
{
	const char *said = getenv("SPANK_" SQ_SRUN_JOB_VAR);
	char nodes[24];

	if (!cfg->prestart_srun_jobs || said == NULL || strcmp(said, "1") != 0 ||
	    !sq_opts_kept_for_job(o) || !file_image(o->image))
		return 0;
	job_nodes(nodes, sizeof(nodes));
	if (nodes[0] && strcmp(nodes, "1") != 0 && cfg->local_cache_gb > 0 &&
	    sq_cache_may_fill(nodes, cfg->local_cache_max_nodes))
		return 0;
	o->prestart = strdup(o->image);
	return o->prestart != NULL;
}

/* As slurmstepd is in user_init: the user's groups and effective ids, root's real one
 * (what the builder and the mounts regain). 0 ok, -1 failed. */
static int become_stepd_user(const struct sq_step *s)
{
	if (s->cred_root.groups != NULL &&
	    setgroups((size_t)s->cred_root.ngroups, s->cred_root.groups) < 0)
		return -1;
	return setegid(s->gid) == 0 && seteuid(s->uid) == 0 ? 0 : -1;
}

/* Let go of what slurmd waits on: it reads the prolog's output until every writer has
 * closed it, so a child that kept the prolog's stdout would hold the job's start until the
 * container is up (1.1 s instead of 0.17 s for a 3-node salloc here). The standard
 * descriptors become /dev/null and every other pipe or socket but keep is closed; files
 * (slurmd's log) stay. */
static void detach_from_prolog(int keep)
{
	struct stat st;
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	for (int i = 0; i < 3 && null >= 0; i++)
		dup2(null, i);
	if (null > 2)
		close(null);
	for (int i = 3; i < 1024; i++)
		if (i != keep && fstat(i, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
			close(i);
}

/* The child, in a session of its own (slurmd's prolog ends its process group): start the
 * container, tell the prolog on fd when the lock is held, or send it the error ("-": none
 * to start, nothing to say). quiet: srun's job, which did not ask in so many words. */
static void prestart_child(struct sq_step *s, int fd, int quiet)
{
	char nodes[24], cwd[PATH_MAX];
	const char *work = getenv("SLURM_JOB_WORK_DIR");
	char **env;
	int rc = -1;

	setsid();
	detach_from_prolog(fd);
	job_nodes(nodes, sizeof(nodes));
	/* The steps find it by the environment it started with: theirs would differ. */
	setenv("PATH", SQ_STANDARD_PATH, 1);
	snprintf(cwd, sizeof(cwd), "%s", work != NULL && work[0] == '/' ? work : "/");
	env = sq_prestart_env(s->uid, s->jobid, nodes[0] ? nodes : NULL,
			      getenv("SLURM_CLUSTER_NAME"));
	if (env == NULL)
		sq_report_error("no passwd entry for uid %u", (unsigned)s->uid);
	else if (become_stepd_user(s) < 0)
		sq_report_error("cannot take the ids of uid %u: %s", (unsigned)s->uid,
				strerror(errno));
	else
		rc = sq_step_prestart(s, env, cwd, fd, quiet);
	if ((rc < 0 && sq_report_pending() != NULL) || rc == 1) {
		const char *msg = rc == 1 && quiet ? "-" : sq_report_pending();
		ssize_t w = msg != NULL ? write(fd, msg, strlen(msg)) : 0;
		(void)w;
	}
	sq_env_free(env);
	_exit(rc < 0 ? 1 : 0);
}

/* Wait for the child's word: "L" its start holds the lock, "-" nothing to start, else
 * its error. what: the flag that asked, for the log. */
static void prestart_wait(int fd, uint32_t jobid, const char *what)
{
	char msg[SQ_ERR_LEN];
	struct pollfd p = { fd, POLLIN, 0 };
	ssize_t n = 0;

	if (poll(&p, 1, SQ_PRESTART_WAIT_S * 1000) > 0)
		n = read(fd, msg, sizeof(msg) - 1);
	/* "-" alone: a message may begin with "--container-image=". */
	if (n > 0 && (msg[0] == 'L' || (n == 1 && msg[0] == '-')))
		return;
	if (n > 0) {
		msg[n] = '\0';
		slurm_error("squall: job %u: %s: %s", (unsigned)jobid, what, msg);
	} else if (n == 0 && p.revents) {
		slurm_error("squall: job %u: %s: the start ended without a word", (unsigned)jobid,
			    what);
	} else {
		slurm_info("squall: job %u: %s: still resolving the image after %d s; the prolog "
			   "goes on", (unsigned)jobid, what, SQ_PRESTART_WAIT_S);
	}
}

int sq_prestart_prolog(const struct sq_config *cfg, spank_t sp)
{
	char err[SQ_ERR_LEN];
	struct sq_opts opts;
	struct sq_step s;
	struct passwd pw, *res = NULL;
	char buf[4096];
	uint32_t jobid;
	const char *what = "--container-prestart";
	uid_t uid;
	int fds[2], quiet = 0;
	pid_t pid;

	sq_opts_init(&opts);
	if (read_job_flags(sp, &opts, err, sizeof(err)) < 0) {
		slurm_error("squall: job prolog: %s", err);
		goto out;
	}
	if (opts.prestart == NULL) {
		if (!srun_job(cfg, &opts))
			goto out;   /* nothing is started for a job that did not ask */
		what = "--container-image (srun's job, started by the prolog)";
		quiet = 1;
	}
	if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS ||
	    getpwuid_r(uid, &pw, buf, sizeof(buf), &res) != 0 || res == NULL ||
	    prestart_flags(&opts) < 0) {
		slurm_error("squall: job prolog: %s: no job id, user or passwd entry: the job's "
			    "steps start their own containers", what);
		goto out;
	}
	sq_step_init(&s, cfg, &opts);
	s.jobid = jobid;
	s.stepid = SQ_STEP_PRESTART;
	s.uid = uid;
	s.gid = pw.pw_gid;
	if (sq_step_prestart_dirs(&s) < 0 || pipe2(fds, O_CLOEXEC) < 0) {
		slurm_error("squall: job %u: %s: %s", (unsigned)jobid, what,
			    sq_report_pending() ? sq_report_pending() : strerror(errno));
		goto out;
	}
	pid = fork();
	if (pid == 0) {
		close(fds[0]);
		prestart_child(&s, fds[1], quiet);
	}
	close(fds[1]);
	if (pid < 0)
		slurm_error("squall: job %u: %s: fork: %s", (unsigned)jobid, what,
			    strerror(errno));
	else
		prestart_wait(fds[0], jobid, what);
	close(fds[0]);
	if (pid > 0)
		waitpid(pid, NULL, WNOHANG);
	sq_cred_free(&s.cred_root);
out:
	sq_opts_free(&opts);
	return 0;
}
