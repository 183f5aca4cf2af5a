/*
 * step.c: a container step in slurmstepd, its phases top to bottom (step.h): prepare,
 * resolve, configure, start or keep, join. Joining a container another step runs is in
 * join.c, the step's end in step_end.c.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"
#include "efa.h"
#include "env.h"
#include "imageref.h"
#include "kept.h"
#include "layer.h"
#include "layer_record.h"
#include "mounts.h"
#include "mounts_exist.h"
#include "named.h"
#include "pmix.h"
#include "promfile.h"
#include "records.h"
#include "report.h"
#include "running.h"
#include "safeopen.h"
#include "save.h"
#include "seccomp.h"
#include "smallio.h"
#include "prestart_env.h"
#include "prestart_mark.h"
#include "step.h"
#include "stepcg.h"
#include "stepconf.h"
#include "strbuf.h"

void sq_step_init(struct sq_step *s, const struct sq_config *cfg, struct sq_opts *opt)
{
	memset(s, 0, sizeof(*s));
	s->cfg = cfg;
	s->opt = opt;
	sq_container_init(&s->ctr);
	sq_nsholder_init(&s->holder);
	s->join_fd[0] = s->join_fd[1] = -1;
	s->build = -1;
}

static int make_runtime_dir(struct sq_step *s)
{
	char err[SQ_ERR_LEN], name[16];
	int top, fd;

	/* As root: runtime_path/ (root's, 0755) then runtime_path/UID (the user's, 0700), both
	 * opened O_NOFOLLOW|O_DIRECTORY and checked, the user's given away through its
	 * descriptor (core/safeopen.h): a link or another user's directory is refused. */
	if (mkdir(s->cfg->runtime_path, 0755) < 0 && errno != EEXIST) {
		sq_report_error("cannot create the runtime directory %s: %s (plugstack.conf "
				"runtime_path)", s->cfg->runtime_path, strerror(errno));
		return -1;
	}
	top = sq_dir_open_checked(AT_FDCWD, s->cfg->runtime_path, -1, err, sizeof(err));
	if (top < 0) {
		sq_report_error("the runtime directory: %s (plugstack.conf runtime_path)", err);
		return -1;
	}
	snprintf(name, sizeof(name), "%u", (unsigned)s->uid);
	fd = sq_dir_make_checked(top, s->cfg->runtime_path, name, (long)s->uid, (long)s->gid,
				 0700, err, sizeof(err));
	close(top);
	if (fd < 0) {
		sq_report_error("the runtime directory of the job user: %s (plugstack.conf "
				"runtime_path=%s)", err, s->cfg->runtime_path);
		return -1;
	}
	close(fd);
	snprintf(s->runtime_dir, sizeof(s->runtime_dir), "%s/%s", s->cfg->runtime_path, name);
	return 0;
}

/* As root: local_cache/ (root's, 0755) then local_cache/UID (the user's, 0700), where the
 * user's own extracted images go (extracted.h), made and checked as the runtime directory
 * is. Without it, steps read from squashfuse. */
static void make_cache_dir(struct sq_step *s)
{
	char err[SQ_ERR_LEN], name[16];
	int top, fd;

	s->cache_dir[0] = '\0';
	if (s->cfg->local_cache_gb <= 0)
		return;
	if (mkdir(s->cfg->local_cache, 0755) < 0 && errno != EEXIST) {
		sq_errf(err, sizeof(err), "cannot create %s: %s", s->cfg->local_cache,
			strerror(errno));
		goto off;
	}
	top = sq_dir_open_checked(AT_FDCWD, s->cfg->local_cache, -1, err, sizeof(err));
	if (top < 0)
		goto off;
	snprintf(name, sizeof(name), "%u", (unsigned)s->uid);
	fd = sq_dir_make_checked(top, s->cfg->local_cache, name, (long)s->uid, (long)s->gid,
				 0700, err, sizeof(err));
	close(top);
	if (fd < 0)
		goto off;
	close(fd);
	snprintf(s->cache_dir, sizeof(s->cache_dir), "%s/%s", s->cfg->local_cache, name);
	return;
off:
	slurm_info("squall: no node-local cache of extracted images: %s; steps read their "
		   "images through squashfuse (plugstack.conf local_cache)", err);
}

/* The step's ids and user. 1 a step that may run in a container, 0 not one (the extern
 * step, the batch step without sbatch_support, or no ids: an error is kept then when the
 * step asked for a container). */
static int read_ids(struct sq_step *s, spank_t sp)
{
	if (spank_get_item(sp, S_JOB_STEPID, &s->stepid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ID, &s->jobid) != ESPANK_SUCCESS)
		return 0;  /* not a step with tasks */
	if (s->stepid == SQ_STEP_EXTERN)
		return 0;
	if (spank_get_item(sp, S_JOB_NODEID, &s->nodeid) != ESPANK_SUCCESS)
		s->nodeid = 0;
	if (spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &s->total_tasks) != ESPANK_SUCCESS)
		s->total_tasks = 0;
	if (spank_get_item(sp, S_JOB_UID, &s->uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_GID, &s->gid) != ESPANK_SUCCESS) {
		/* Never run a container step on the host because an item was missing. */
		if (s->opt->image != NULL || s->opt->name != NULL) {
			s->active = 1;
			sq_report_fail("slurmstepd did not give the job's user and group ids: "
				     "cannot start the container (report this with the Slurm "
				     "version)");
		}
		return 0;
	}
	return s->stepid != SQ_STEP_BATCH || s->cfg->sbatch_support;
}

/* The user's flags, from srun and the job's environment: 1 a container step (s->active;
 * maybe with an error kept), 0 not one. */
static int read_flags(struct sq_step *s, spank_t sp)
{
	char err[SQ_ERR_LEN], warn[512];
	char **job_env = NULL;
	int r;

	spank_get_item(sp, S_JOB_ENV, &job_env);
	if (sq_args_load_env(job_env, err, sizeof(err)) < 0) {
		s->active = 1;
		sq_report_fail(err);
		return 1;
	}
	if (sq_args_error() != NULL) {
		s->active = 1;
		sq_report_fail(sq_args_error());
		return 1;
	}
	r = sq_opts_check(s->opt, warn, sizeof(warn), err, sizeof(err));
	if (r == 0)
		return 0;
	s->active = 1;
	if (r < 0)
		sq_report_fail(err);
	return 1;
}

void sq_step_post_opt(struct sq_step *s, spank_t sp)
{
	const struct sq_opts *o = s->opt;
	char err[SQ_ERR_LEN];

	if (!read_ids(s, sp) || !read_flags(s, sp) || sq_report_failed())
		return;
	s->verbose = (o->log != SQ_LOG_UNSET ? o->log : s->cfg->log) == SQ_LOG_VERBOSE;
	s->entrypoint_log = o->entrypoint_log == 1;
	if (sq_cred_init(&s->cred_root, s->uid, s->gid, err, sizeof(err)) < 0) {
		sq_report_fail(err);
		return;
	}
	if (make_runtime_dir(s) == 0)
		make_cache_dir(s);
}

/* A marker that tells the job epilog this job made named containers on the node. */
static void mark_job_names(const struct sq_step *s)
{
	char path[PATH_MAX + 64];
	int fd;

	snprintf(path, sizeof(path), "%s/job%u.names", s->runtime_dir, (unsigned)s->jobid);
	/* The directory is the user's: a FIFO planted there must not block the step. */
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
	if (fd >= 0)
		close(fd);
}

/* The job's key for sqshbuild's pins: CLUSTER-UID-JOBID. The uid and job id are
 * slurmstepd's; the cluster name only keeps two clusters that share a cache apart (a user
 * who changes it reaches only her own jobs' pins). */
static void job_key(const struct sq_step *s, char *out, size_t outlen)
{
	const char *cluster = sq_env_value(s->runtime_env, "SLURM_CLUSTER_NAME");
	char name[65];
	size_t n = 0;

	for (; cluster != NULL && cluster[n] != '\0' && n < sizeof(name) - 1; n++) {
		char c = cluster[n];
		name[n] = (isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-') ? c : '_';
	}
	name[n] = '\0';
	snprintf(out, outlen, "%s%s-%u-%u", n && isalnum((unsigned char)name[0]) ? "" : "c",
		 name, (unsigned)s->uid, (unsigned)s->jobid);
}

/* The image: a file, or a registry reference through the site's importer, `enroot load`
 * (use_enroot_load) or sqshbuild's shared cache. 0 ok, -1 failed (error kept). */
/* A line of sqshbuild's while the step waits for its image: on srun's stderr (the spank
 * log of user_init), where a step that waits never looks hung. */
static void say_progress(const char *line)
{
	slurm_spank_log("squall: %s", line);
}

/* The step's cgroup.procs, which the image builder joins so that scancel ends it with the
 * step (core/stepcg.h); "" when there is none to join. */
static void step_cgroup(const struct sq_step *s, char *out, size_t outlen)
{
	size_t cglen, milen;   /* sq_read_file sets them: never NULL */
	char *cg = sq_read_file("/proc/self/cgroup", &cglen);
	char *mi = sq_read_file("/proc/self/mountinfo", &milen);
	char step[32];

	if (s->stepid == SQ_STEP_BATCH)
		snprintf(step, sizeof(step), "step_batch");
	else
		snprintf(step, sizeof(step), "step_%u", (unsigned)s->stepid);
	if (sq_stepcg_procs(cg, mi, step, out, outlen) < 0)
		out[0] = '\0';
	free(cg);
	free(mi);
}

static int resolve_image(struct sq_step *s, const char *cwd, const struct sq_cred *cred)
{
	const struct sq_config *cfg = s->cfg;
	struct sq_image_env ienv = { cwd, cfg->sqshbuild, cfg->image_cache, s->runtime_env, cred,
				     NULL, NULL, s->nodeid == 0 ? SQ_PROGRESS_EVERY_S : 0,
				     say_progress, NULL, s->stepid != SQ_STEP_BATCH, 0 };
	struct sq_image_ref ref;
	char err[SQ_ERR_LEN], job[96], procs[PATH_MAX];
	int registry, rc;
	double t0;

	job_key(s, job, sizeof(job));
	ienv.job = job;
	/* The pin line where Pyxis says its import lines (a step of one task, the batch
	 * step) or with --container-log=verbose: other steps' stderr stays as Pyxis's. */
	ienv.quiet_pin = !s->verbose && s->stepid != SQ_STEP_BATCH && s->total_tasks > 1;
	step_cgroup(s, procs, sizeof(procs));
	ienv.cgroup_procs = procs[0] ? procs : NULL;

	if (sq_imgref_parse(s->opt->image, &ref, err, sizeof(err)) < 0) {
		sq_imgref_free(&ref);
		return sq_report_fail(err);
	}
	registry = ref.kind != SQ_IMAGE_FILE;
	sq_imgref_free(&ref);
	if (registry && cfg->importer != NULL) {
		/* Pulled when a file is needed (fetch_image): not for a named container that
		 * exists already, as Pyxis skips the import then. */
		char keyed[PATH_MAX + 16];
		if (sq_importer_setup(&s->importer, cfg->importer, s->runtime_env,
				      cfg->runtime_path, s->uid, s->jobid, s->stepid, cred, err,
				      sizeof(err)) < 0)
			return sq_report_fail(err);
		snprintf(keyed, sizeof(keyed), "importer:%s", s->opt->image);
		sq_hash_hex(keyed, strlen(keyed), s->image.identity);
		s->image.from_registry = 1;
		return 0;
	}
	if (registry && cfg->use_enroot_load) {
		char keyed[PATH_MAX + 16];
		s->load_uri = sq_enroot_uri(s->opt->image);
		if (s->load_uri == NULL)
			return sq_report_fail("out of memory");
		snprintf(keyed, sizeof(keyed), "enroot-load:%s", s->load_uri);
		sq_hash_hex(keyed, strlen(keyed), s->image.identity);
		return 0;
	}
	t0 = sq_now();
	rc = sq_image_resolve(s->opt->image, &ienv, &s->image, err, sizeof(err));
	if ((s->image.from_registry && !s->image.from_memo) || (rc < 0 && registry)) {
		/* sqshbuild ran (a pull, or a hit in the shared cache): the node's metrics */
		s->build = rc == 0;
		s->build_s = sq_now() - t0;
	}
	/* The builder's lines (it may not pull this: built as the user) */
	sq_report_warn(s->image.note);
	return rc < 0 ? sq_report_fail(err) : 0;
}

/* The importer's `get`, once a file is needed. 0 ok, -1 failed (error kept). */
static int fetch_image(struct sq_step *s)
{
	char err[SQ_ERR_LEN], what[PATH_MAX + 64], identity[17];

	if (s->image.path != NULL || s->importer.envp == NULL)
		return 0;
	if (sq_importer_get(&s->importer, s->opt->image, &s->image.path, err, sizeof(err)) < 0)
		return sq_report_fail(err);
	snprintf(what, sizeof(what), "--container-image=%s (from the importer: %s)",
		 s->opt->image, s->image.path);
	/* The identity stays the reference's: the file's name is the importer's business. */
	if (sq_image_check_file(what, s->image.path, identity, err, sizeof(err)) < 0)
		return sq_report_fail(err);
	return 0;
}

/* --container-save: relative to the job's working directory, as with Pyxis. Node 0, which
 * saves, checks the destination now, as the user: the save itself runs after the tasks
 * have exited, when Slurm no longer lets a plugin change the step's exit code. */
static int prepare_save(struct sq_step *s, const char *cwd)
{
	char err[SQ_ERR_LEN];
	const char *rel;

	if (s->opt->save == NULL)
		return 0;
	for (rel = s->opt->save; strncmp(rel, "./", 2) == 0; rel += 2)
		while (rel[2] == '/')
			rel++;
	if (s->opt->save[0] == '/')
		s->save_path = strdup(s->opt->save);
	else if (asprintf(&s->save_path, "%s/%s", cwd, rel) < 0)
		s->save_path = NULL;
	if (s->save_path == NULL)
		return sq_report_fail("out of memory");
	if (s->nodeid == 0 && sq_save_check(s->save_path, err, sizeof(err)) < 0)
		return sq_report_fail(err);
	return sq_step_save_prepare(s);
}

/* --container-name: the named container, created from the image when it does not exist
 * (the importer's file is fetched only then). 0 ok, -1 (error kept). */
static int named_target(struct sq_step *s, const struct sq_runtime *rt)
{
	char err[SQ_ERR_LEN], warn[1024];
	struct sq_named_query q;

	if (s->importer.envp != NULL && !sq_named_exists(rt, s->run_name) &&
	    fetch_image(s) < 0)
		return -1;
	q = (struct sq_named_query){
		s->runtime_dir, s->run_name, s->opt->name, s->opt->name_mode,
		s->cfg->container_name_strict,
		{ s->opt->image, s->image.path, s->load_uri,
		  s->opt->image ? s->image.identity : NULL } };
	if (sq_named_prepare(rt, &q, &s->target, warn, sizeof(warn), err, sizeof(err)) < 0)
		return sq_report_fail(err);
	sq_report_warn(warn);
	if (s->cfg->container_scope == SQ_SCOPE_JOB)
		mark_job_names(s);
	return 0;
}

/* The step's own container, pyxis_JOBID.STEPID: created from the image for
 * --container-save, or loaded by Enroot (use_enroot_load). 0 ok, -1 (error kept). */
static int own_target(struct sq_step *s, const struct sq_runtime *rt)
{
	char err[SQ_ERR_LEN], msg[SQ_ERR_LEN];
	int made;

	if ((s->save_container = strdup(s->step_name)) == NULL)
		return sq_report_fail("out of memory");
	sq_named_remove(rt, s->save_container, err, sizeof(err));
	made = s->load_uri != NULL
	       ? sq_named_load(rt, s->save_container, s->load_uri, err, sizeof(err))
	       : sq_named_create(rt, s->save_container, s->image.path, err, sizeof(err));
	if (made < 0) {
		free(s->save_container);
		s->save_container = NULL;
		sq_errf(msg, sizeof(msg), "%s%s", s->load_uri ? "" : "--container-save: ", err);
		return sq_report_fail(msg);
	}
	s->target = strdup(s->save_container);
	return s->target != NULL ? 0 : sq_report_fail("out of memory");
}

/* What `enroot start` gets: the named container, the step's own container (for
 * --container-save on node 0, or loaded by Enroot), or the image file. */
static int prepare_target(struct sq_step *s, const struct sq_runtime *rt)
{
	int want_save = s->opt->save != NULL && s->nodeid == 0;

	if (s->opt->name != NULL)
		return named_target(s, rt);
	if (fetch_image(s) < 0)
		return -1;
	if (want_save || s->load_uri != NULL)
		return own_target(s, rt);
	s->target = strdup(s->image.path);
	return s->target != NULL ? 0 : sq_report_fail("out of memory");
}

/* A container started for the step: its tasks run in a plain copy of its mount namespace
 * (layer.h), so that they, not its stopped first process, stand for it in `enroot list -f`,
 * as with Pyxis. The first running instance of a named container records it for the steps
 * that join it. Without it (the kernel refused) the tasks join the container's own
 * namespace. */
static void share_layer(struct sq_step *s)
{
	char err[SQ_ERR_LEN];
	int first = s->opt->name != NULL && !sq_running_live(s->runtime_dir, s->run_name);

	if (sq_layer_make(&s->ctr, SQ_LAYER, &s->cred_user, SQ_LAYER_SHARE, err,
			  sizeof(err)) < 0) {
		slurm_info("squall: %s", err);
		return;
	}
	if (!s->ctr.layer)
		return;
	sq_layer_record(s->runtime_dir, s->jobid, s->stepid, s->ctr.layer_dev, s->ctr.layer_ino);
	if (first)
		sq_layer_record_named(s->runtime_dir, s->run_name, s->ctr.layer_dev,
				      s->ctr.layer_ino);
}

/* --container-unshare, the tasks' layer, then the records other steps join by. */
static void after_start(struct sq_step *s)
{
	char err[SQ_ERR_LEN];
	int pmix;

	if (s->opt->unshare) {
		const struct sq_nsholder_target t = { s->ctr.ns_user, s->ctr.pidfd, s->ctr.ns_mnt,
						      s->ctr.root_fd };
		if (sq_nsholder_make(&s->holder, s->opt->unshare, &t, s->uid, s->gid, err,
				     sizeof(err)) < 0) {
			sq_report_fail(err);
			return;
		}
	}
	/* Slurm's PMIx: the step's own directories, in a kept container's later steps too. A
	 * step that runs no MPI program under MpiDefault=pmix must not fail for it. */
	pmix = s->pmix ? sq_pmix_bind_dirs(s->ctr.ns_mnt, s->job_env, s->uid, s->gid, s->jobid,
					   s->stepid, err, sizeof(err)) : 0;
	if (pmix == -1)
		sq_report_warn(err);
	else if (pmix < 0)
		slurm_info("squall: %s", err);
	/* Datasets: the step's, in its namespace, before the tasks (and a shared layer) see
	 * it; a step without its data fails. */
	if (sq_datasets_mount(&s->datasets, s->ctr.ns_user, s->ctr.ns_mnt, s->ctr.root_fd,
			      s->uid, s->gid, err, sizeof(err)) < 0) {
		sq_report_fail(err);
		return;
	}
	if (!s->ctr.kept)
		share_layer(s);
	if (sq_running_record(s->runtime_dir, s->step_name, s->ctr.pid, s->ctr.starttime,
			      s->holder.pid > 0 ? s->holder.pid : 0, s->holder.starttime, err,
			      sizeof(err)) < 0 ||
	    (s->opt->name != NULL &&
	     sq_running_record(s->runtime_dir, s->run_name, s->ctr.pid, s->ctr.starttime,
			       s->holder.pid > 0 ? s->holder.pid : 0, s->holder.starttime, err,
			       sizeof(err)) < 0))
		/* Later steps start their own instance instead of joining: say so. */
		slurm_info("squall: %s", err);
}

/* The job's kept container (kept.h) in mode (enum sq_kept_mode): 1 when the step is
 * served by it (or failed: error kept), 0 when a container must be started for it. */
static int serve_kept(struct sq_step *s, const struct sq_start_request *req, int mode,
		      int notify_fd)
{
	const struct sq_config *cfg = s->cfg;
	struct sq_kept_step ks = {
		s->runtime_dir, s->jobid, s->stepid, s->nodeid, s->image.path, s->image.identity,
		s->cache_dir, cfg->local_cache_gb, cfg->local_cache_max_nodes,
		cfg->local_cache_copy_wait, SQ_LAYER, SQ_KEPT_IDLE_S, mode, notify_fd };
	char note[1024] = "", err[SQ_ERR_LEN];
	int r = sq_kept_serve(&s->ctr, req, &ks, &s->served, note, sizeof(note), err,
			      sizeof(err));

	if (note[0])
		slurm_info("squall: %s", note);
	if (r < 0)
		sq_report_fail(err);
	return r != 0;
}

/* The container the job prolog started (prestart.h), found by the key the prolog's
 * environment gives it: 1 joined (or failed: error kept), 0 none fits this step. */
static int join_prestarted(struct sq_step *s, const struct sq_start_request *req)
{
	char path[PATH_MAX * 2 + 8], err[SQ_ERR_LEN], **env, **rt = NULL;
	struct sq_start_request pre = *req;
	int r = 0;

	env = sq_prestart_env(s->uid, s->jobid, sq_env_value(s->job_env, "SLURM_JOB_NUM_NODES"),
			      sq_env_value(s->job_env, "SLURM_CLUSTER_NAME"));
	if (env != NULL && sq_runtime_path_from(s->enroot, SQ_STANDARD_PATH, path,
						sizeof(path)) == 0 &&
	    sq_stepconf_env(env, s->opt, s->runtime_dir, path, &rt, err, sizeof(err)) == 0) {
		char name[128];

		pre.envp = rt;
		if (sq_prestart_env_differs(rt, req->envp, name, sizeof(name))) {
			const char *theirs = sq_env_value(rt, name);
			const char *mine = sq_env_value(req->envp, name);
			char t[SQ_SHOW_MAX], m[SQ_SHOW_MAX];

			/* The values are the user's: shown escaped and cut, one log line. */
			slurm_info("squall: job %u: the job prolog's container was started with "
				   "%s%s%s, this step asks for %s%s%s: the step starts its own",
				   (unsigned)s->jobid, name, theirs ? "=" : " unset",
				   theirs ? sq_show(theirs, t, sizeof(t)) : "", name,
				   mine ? "=" : " unset", mine ? sq_show(mine, m, sizeof(m)) : "");
		} else
			r = serve_kept(s, &pre, SQ_KEPT_JOIN, -1);
	}
	if (r && !sq_report_failed()) {
		char how[160];

		sq_prestart_marked(s->runtime_dir, s->jobid, how, sizeof(how));
		snprintf(s->served_text, sizeof(s->served_text), "kept container of the job reused "
			 "(no runtime start; started by the job prolog%s%s)", how[0] ? ": " : "",
			 how);
		s->served = s->served_text;
	}
	sq_env_free(rt);
	sq_env_free(env);
	return r;
}

/* The job's kept container (kept.h): the one the job prolog started when it fits, else
 * the one the job's steps start. 1 when the step is served by it (or failed: error
 * kept), 0 when a container must be started for the step after all. */
static int use_kept_container(struct sq_step *s, const struct sq_start_request *req)
{
	char how[8];

	if ((s->opt->prestart != NULL || sq_prestart_marked(s->runtime_dir, s->jobid, how,
							    sizeof(how))) &&
	    join_prestarted(s, req))
		return 1;
	return serve_kept(s, req, SQ_KEPT_STEP, -1);
}

/* The step's one decision (lifecycle.h), from every fact it needs: a named step and one
 * with a container of its own are sq_life_decide's to refuse, like the others. */
static int decide(const struct sq_step *s, struct sq_life_plan *plan)
{
	const struct sq_config *cfg = s->cfg;
	const struct sq_opts *o = s->opt;
	const struct sq_life_input in = {
		cfg->container_reuse, o->reuse, o->name != NULL, s->save_container != NULL,
		s->stepid == SQ_STEP_BATCH,
		(o->entrypoint >= 0 ? o->entrypoint : cfg->execute_entrypoint) == 1 };

	sq_life_decide(&in, plan);
	return plan->action;
}

/* A container for the step alone, under its own keeper (keeper_client.h). */
static void start_own_container(struct sq_step *s, const struct sq_start_request *req)
{
	char err[SQ_ERR_LEN], what[16];

	snprintf(what, sizeof(what), "%u", (unsigned)s->stepid);
	if (sq_container_start(&s->ctr, req, err, sizeof(err)) < 0) {
		sq_report_fail(err);
	} else {
		if (sq_record_keeper(s->runtime_dir, s->jobid, what, s->ctr.keeper.pid,
				     s->ctr.keeper.starttime, err, sizeof(err)) < 0)
			/* Only the job epilog's safety net needs it: say so, go on. */
			slurm_info("squall: %s", err);
		after_start(s);
	}
	sq_phase_end("start container");
}

/* Phase 1, prepare: the runtime, --container-save, the helpers. 0 ok, -1 (error kept). */
static int prepare(struct sq_step *s, char *const job_env[], const char *cwd)
{
	char err[SQ_ERR_LEN];

	sq_named_step_name(s->jobid, s->stepid, s->step_name, sizeof(s->step_name));
	if (sq_stepconf_runtime(s->cfg, s->opt, job_env, s->runtime_dir, &s->enroot,
				&s->runtime_env) < 0 || prepare_save(s, cwd) < 0)
		return -1;
	if (access(SQ_KEEPER, X_OK) < 0 || access(SQ_LAYER, X_OK) < 0) {
		sq_errf(err, sizeof(err), "%s or %s is not executable on this node (%s): "
			"reinstall squall (make -C spank install)", SQ_KEEPER, SQ_LAYER,
			strerror(errno));
		return sq_report_fail(err);
	}
	s->cred_user = (struct sq_cred){ .uid = s->uid, .gid = s->gid };
	return 0;
}

/* Phase 2, resolve: the image, or the container another step runs (join.c).
 * 0 go on; 1 joined; -1 failed (error kept). */
static int resolve(struct sq_step *s, const char *cwd)
{
	uint32_t attach_job, attach_step_id;
	int r;

	if (s->opt->name != NULL &&
	    sq_named_is_step(s->opt->name, &attach_job, &attach_step_id)) {
		r = sq_step_attach_step(s, attach_job, attach_step_id);
		if (r > 0)
			sq_phase_end("join running container");
		return r;
	}
	if (s->opt->image != NULL && resolve_image(s, cwd, &s->cred_user) < 0)
		return -1;
	sq_phase_end("resolve image");
	if (s->opt->name == NULL)
		return 0;
	if (sq_named_runtime_name(s->cfg->container_scope == SQ_SCOPE_JOB, s->jobid,
				  s->opt->name, s->run_name, sizeof(s->run_name)) < 0)
		return sq_report_fail("--container-name: name too long");
	r = sq_step_join_named(s);
	if (r > 0)
		sq_phase_end("join running container");
	return r;
}

/* Phase 3, configure: the conf file the runtime starts with (removed once it started:
 * sq_step_user_init), then what it starts. 0 ok, -1 (error kept). */
static int configure(struct sq_step *s, spank_t sp, char *const job_env[], const char *cwd)
{
	struct sq_conf_input in = { s->cfg, s->opt, NULL, &s->datasets };
	struct sq_runtime rt;

	if (s->stepid == SQ_STEP_BATCH) {
		int argc = 0;
		char **argv = NULL;
		if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS &&
		    argc > 0 && argv[0] != NULL && argv[0][0] == '/')
			in.batch_script = argv[0];
	}
	snprintf(s->conf_path, sizeof(s->conf_path), "%s/step-%u.%u.conf", s->runtime_dir,
		 (unsigned)s->jobid, (unsigned)s->stepid);
	if (sq_stepconf_make(&in, job_env, cwd, s->conf_path) < 0) {
		s->conf_path[0] = '\0';
		return -1;
	}
	rt = (struct sq_runtime){ s->enroot, s->runtime_env, &s->cred_user };
	if (prepare_target(s, &rt) < 0)
		return -1;
	sq_phase_end("prepare");
	return 0;
}

/* Phase 4, start or keep: decided once (decide), acted on as decided: the job's kept
 * container serves the step, else (or when the kept path cannot) a container is started
 * for it. */
static void start_or_keep(struct sq_step *s)
{
	struct sq_start_request req = {
		SQ_KEEPER, s->enroot, s->conf_path, NULL, s->target, s->opt->writable,
		s->opt->remap_root, s->runtime_env, &s->cred_user, SQ_START_TIMEOUT_S, NULL };
	struct sq_life_plan plan;

	s->served = NULL;
	if (decide(s, &plan) == SQ_LIFE_KEPT && use_kept_container(s, &req)) {
		if (!sq_report_failed())
			after_start(s);
	} else {
		if (s->served == NULL)
			s->served = plan.why;
		start_own_container(s, &req);
	}
	/* The importer's file is held open by the started container now (Pyxis's protocol
	 * calls release here, and again at the step's end). */
	if (s->importer.envp != NULL)
		sq_importer_release(&s->importer);
}

int sq_step_prestart_dirs(struct sq_step *s)
{
	char err[SQ_ERR_LEN];

	s->active = 1;
	if (sq_cred_init(&s->cred_root, s->uid, s->gid, err, sizeof(err)) < 0)
		return sq_report_fail(err);
	if (make_runtime_dir(s) < 0)
		return -1;
	make_cache_dir(s);
	return 0;
}

int sq_step_prestart(struct sq_step *s, char *const job_env[], const char *cwd,
		     int notify_fd, int quiet)
{
	struct sq_start_request req;
	struct sq_life_plan plan;
	int r = -1;

	s->job_env = job_env;
	if (prepare(s, job_env, cwd) < 0 || resolve(s, cwd) != 0 ||
	    configure(s, NULL, job_env, cwd) < 0)
		goto out;
	if (decide(s, &plan) != SQ_LIFE_KEPT) {
		if (!quiet)
			sq_report_error("the job's container is not kept on this node (%s): the "
					"steps start their own", plan.why);
		r = 1;
		goto out;
	}
	req = (struct sq_start_request){
		SQ_KEEPER, s->enroot, s->conf_path, NULL, s->target, s->opt->writable,
		s->opt->remap_root, s->runtime_env, &s->cred_user, SQ_START_TIMEOUT_S, NULL };
	if (serve_kept(s, &req, SQ_KEPT_PRESTART, notify_fd) && !sq_report_failed())
		r = 0;
	if (s->importer.envp != NULL)
		sq_importer_release(&s->importer);
out:
	if (s->conf_path[0]) {
		unlink(s->conf_path);
		s->conf_path[0] = '\0';
	}
	s->job_env = NULL;
	return r;
}

void sq_step_user_init(struct sq_step *s, spank_t sp)
{
	char **job_env = NULL, cwd[PATH_MAX];

	sq_phase_begin();
	spank_get_item(sp, S_JOB_ENV, &job_env);
	s->pmix = sq_pmix_step(job_env);
	s->job_env = job_env;
	if (getcwd(cwd, sizeof(cwd)) == NULL)
		snprintf(cwd, sizeof(cwd), "/");
	if (s->cfg->metrics_dir != NULL)
		sq_metrics_join_open(s->join_fd);  /* without it, no join time: no harm */
	s->stage = SQ_MSTAGE_PREPARE;
	if (prepare(s, job_env, cwd) < 0)
		return;
	s->stage = SQ_MSTAGE_RESOLVE;
	if (resolve(s, cwd) != 0)
		return;
	s->stage = SQ_MSTAGE_CONFIGURE;
	if (configure(s, sp, job_env, cwd) == 0) {
		s->stage = SQ_MSTAGE_START;
		start_or_keep(s);
	}
	if (s->conf_path[0]) {
		unlink(s->conf_path);
		s->conf_path[0] = '\0';
	}
	s->job_env = NULL;
}

/* LANG, LC_ALL, LANGUAGE leave the task unless --container-env names them (env.h). */
static int unset_locale(const struct sq_step *s, spank_t sp, char *const task_env[])
{
	char err[SQ_ERR_LEN], **names = NULL;

	if (sq_env_task_unset(task_env, s->opt->env, &names, err, sizeof(err)) < 0)
		return -1;
	for (size_t i = 0; names[i] != NULL; i++)
		spank_unsetenv(sp, names[i]);
	sq_env_free(names);
	return 0;
}

/* The runtime runs with a fixed PATH (stepconf.h), which Enroot passes on to the
 * container's first process: not the image's, so it must not replace the task's. An image
 * (or environ.d) that sets PATH gives the container its own value, which stays. */
static void drop_runtime_path(struct sq_step *s)
{
	const char *path = sq_env_value(s->runtime_env, "PATH");
	char entry[PATH_MAX * 4];

	if (path != NULL && (size_t)snprintf(entry, sizeof(entry), "PATH=%s", path) < sizeof(entry))
		sq_env_block_drop(s->ctr.environ, &s->ctr.environ_len, entry);
}

static void set_task_env(void *sp, const char *key, const char *value)
{
	spank_setenv((spank_t)sp, key, value, 1);
}

/* Phase 5, join: the task enters the container (and its unshared namespaces) and takes
 * its environment. 0 ok, -1 said on the task's stderr. */
static int join_task(struct sq_step *s, spank_t sp, uint32_t global_id)
{
	char err[SQ_ERR_LEN];
	char **task_env = NULL, **overlay = NULL;

	if (sq_container_join(&s->ctr, s->opt->workdir, err, sizeof(err)) < 0 ||
	    sq_nsholder_join(&s->holder, err, sizeof(err)) < 0) {
		sq_report_now("squall: error: ", "task %u: %s", (unsigned)global_id, err);
		return -1;
	}
	spank_get_item(sp, S_JOB_ENV, &task_env);
	drop_runtime_path(s);
	if (unset_locale(s, sp, task_env) < 0 ||
	    sq_env_overlay(s->ctr.environ, s->ctr.environ_len, s->opt->env, task_env, &overlay,
			   err, sizeof(err)) < 0) {
		sq_report_now("squall: error: ", "%s", err);
		return -1;
	}
	for (size_t i = 0; overlay[i] != NULL; i++) {
		char *eq = strchr(overlay[i], '=');
		if (eq == NULL)
			continue;
		*eq = '\0';
		spank_setenv(sp, overlay[i], eq + 1, 1);
	}
	sq_env_free(overlay);
	if (s->pmix)
		sq_pmix_task_env(task_env, set_task_env, sp);
	/* As Pyxis: unprivileged tasks run under Enroot's seccomp filter (seccomp.h). */
	if (s->uid != 0 && sq_seccomp_install(err, sizeof(err)) < 0) {
		sq_report_now("squall: error: ", "task %u: %s", (unsigned)global_id, err);
		return -1;
	}
	return 0;
}

/* --container-entrypoint-log: what the runtime printed while it started. */
static void say_entrypoint_output(const struct sq_step *s)
{
	char *text = sq_capture_read(s->ctr.child.out_fd);
	char *etext = sq_capture_read(s->ctr.child.err_fd);

	if (text && write(STDERR_FILENO, text, strlen(text)) < 0) {
		/* best effort */
	}
	if (etext && write(STDERR_FILENO, etext, strlen(etext)) < 0) {
		/* best effort */
	}
	free(text);
	free(etext);
}

int sq_step_task_init(struct sq_step *s, spank_t sp)
{
	int local_id = 0, joined;
	uint32_t global_id = 0;
	double t0;

	if (!s->active)
		return 0;
	spank_get_item(sp, S_TASK_ID, &local_id);
	spank_get_item(sp, S_TASK_GLOBAL_ID, &global_id);
	if (sq_report_failed()) {
		if (local_id == 0) {
			/* what led there first (the builder's reason, a fallback), then the error */
			sq_report_warnings();
			sq_report_flush();
		}
		return -1;
	}
	if (local_id == 0)
		sq_report_warnings();
	sq_step_save_guard(s, sp);   /* node 0 of --container-save: returns in the task */
	t0 = sq_now();
	joined = join_task(s, sp, global_id) == 0;
	if (joined)
		sq_step_save_started(s);
	if (local_id == 0)  /* its time, or its failure, for the node's metrics */
		sq_metrics_join_say(s->join_fd[1], joined, sq_now() - t0);
	if (!joined)
		return -1;
	if (s->entrypoint_log && local_id == 0)
		say_entrypoint_output(s);
	if (s->verbose && local_id == 0) {
		char host[128] = "";
		gethostname(host, sizeof(host) - 1);
		sq_report_now("squall: ", "timings on %s (%s): %s, join %.1f ms", host,
			      s->served ? s->served : "started", sq_phase_text(),
			      (sq_now() - t0) * 1000.0);
	}
	return 0;
}
