/*
 * spank_squall.c: the slurmstepd, srun and sbatch callbacks -- the order of things.
 *
 *   init          all contexts: plugstack arguments (refuse to load on a bad one),
 *                 register the flags in srun, sbatch/salloc and slurmstepd
 *   init_post_opt srun/sbatch: environment sources, final check, errors on the terminal
 *                 slurmstepd (root): decide whether the step runs in a container,
 *                 create the per-user runtime directory
 *   user_init     slurmstepd, as the user, before any task: resolve the image, join
 *                 the named container another step runs, or check mounts, EFA plan,
 *                 named container, and start the node's one container
 *   task_init     each task, as the user, before exec: raise a kept error, or join
 *                 the container (and its unshared namespaces), take its environment,
 *                 and install the seccomp filter of unprivileged tasks
 *   task_exit     slurmstepd, after the node's last task: --container-save on node 0, then
 *                 the step's own container and the importer's file go
 *   exit          slurmstepd: stop the container (and the namespace holder)
 *   job_epilog    slurmd: remove the job's named containers (container_scope=job)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <pwd.h>

#include <slurm/spank.h>

#include "args.h"
#include "config.h"
#include "container.h"
#include "efa.h"
#include "env.h"
#include "image.h"
#include "imageref.h"
#include "importer.h"
#include "keeper.h"
#include "reap.h"
#include "kept.h"
#include "mounts.h"
#include "mounts_exist.h"
#include "named.h"
#include "nsholder.h"
#include "report.h"
#include "runcmd.h"
#include "running.h"
#include "safeopen.h"
#include "save.h"
#include "seccomp.h"
#include "stepconf.h"
#include "unshare.h"

SPANK_PLUGIN(squall, 1);

#ifndef SQ_LIBEXEC_DIR
#define SQ_LIBEXEC_DIR "/usr/local/libexec/squall"
#endif
/* Slurm's special step ids (slurm.h), stable across 22.05 .. 26.05. */
#define SQ_STEP_BATCH 0xfffffffbU
#define SQ_STEP_EXTERN 0xfffffffcU
/* A start that has not reached the container's first command by then never will
 * (e.g. a wrapper around enroot that does not exec it); hooks may be slow, so be
 * generous. */
#define SQ_START_TIMEOUT_S 300
/* Holds the runtime outside slurmstepd's process tree (keeper.h). */
#define SQ_KEEPER SQ_LIBEXEC_DIR "/squall-keeper"
/* Makes a step's fresh layer on the job's kept container (kept.h). */
#define SQ_LAYER SQ_LIBEXEC_DIR "/squall-layer"
/* A kept container no step has used for this long ends (the epilog ends it sooner). */
#define SQ_KEPT_IDLE_S 600

static struct sq_config cfg;
static int cfg_ready;

/* Everything one slurmstepd knows about its step. */
static struct {
	int active;            /* the step runs in a container */
	int failed;            /* an error is kept for task_init */
	uid_t uid;
	gid_t gid;
	uint32_t jobid, stepid, nodeid;
	struct sq_cred cred_root;   /* for calls made as root (exit): with the groups */
	struct sq_cred cred_user;   /* for calls made as the user (user_init) */
	char runtime_dir[PATH_MAX];
	char conf_path[PATH_MAX + 64];
	char warnings[2048];        /* printed once by local task 0 */
	char *target;               /* what `enroot start` got: image path or name */
	char *save_container;       /* the step's own container (--container-save, or loaded
				       with use_enroot_load), pyxis_JOBID.STEPID, removed at exit */
	char **runtime_env;
	char *enroot;               /* the runtime: enroot= or `enroot` on slurmstepd's PATH */
	char *save_path;            /* --container-save, absolute (from the job's cwd) */
	char *load_uri;             /* use_enroot_load: the registry image, loaded by Enroot */
	char step_name[64];         /* pyxis_JOBID.STEPID: the step's record (name JOBID.STEPID) */
	char run_name[320];         /* the named container's runtime name */
	struct sq_nsholder holder;  /* --container-unshare */
	struct sq_importer importer;
	struct sq_image image;
	struct sq_container ctr;
	int verbose;
	int entrypoint_log;
	int saved;                  /* --container-save done */
	const char *served;         /* how the step got its container, for the verbose log */
	char cache_dir[PATH_MAX];   /* the user's node-local cache of extracted images, or "" */
} st;

static void fail(const char *msg)
{
	sq_report_error("%s", msg);
	st.failed = 1;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	char err[512];
	spank_context_t ctx = spank_context();

	if (sq_config_parse(&cfg, ac, av, err, sizeof(err)) < 0) {
		slurm_error("squall: %s", err);
		if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR)
			sq_report_now("squall: error: ", "%s", err);
		return -1;
	}
	cfg_ready = 1;
	sq_container_init(&st.ctr);
	sq_nsholder_init(&st.holder);
	if (ctx == S_CTX_LOCAL || ctx == S_CTX_REMOTE || ctx == S_CTX_ALLOCATOR)
		return sq_args_register(sp);
	return 0;
}

/* srun / sbatch / salloc: everything the user can get wrong in the flags is said here,
 * on the terminal, before anything is allocated. */
static int post_opt_local(void)
{
	extern char **environ;
	char err[512], warn[512];
	int r;

	if (sq_args_error() != NULL)
		return -1;
	if (sq_args_load_env(environ, err, sizeof(err)) < 0) {
		sq_report_now("squall: error: ", "%s", err);
		return -1;
	}
	r = sq_opts_check(&sq_args, warn, sizeof(warn), err, sizeof(err));
	if (r < 0) {
		sq_report_now("squall: error: ", "%s", err);
		return -1;
	}
	if (r == 0 && warn[0])
		sq_report_now("squall: warning: ", "%s", warn);
	return 0;
}

static int make_runtime_dir(void)
{
	char err[PATH_MAX + 256], name[16];
	int top, fd;

	/* As root: runtime_path/ (root's, 0755) then runtime_path/UID (the user's, 0700), both
	 * opened O_NOFOLLOW|O_DIRECTORY and checked, the user's given away through its
	 * descriptor (core/safeopen.h): a link or another user's directory is refused. */
	if (mkdir(cfg.runtime_path, 0755) < 0 && errno != EEXIST) {
		sq_report_error("cannot create the runtime directory %s: %s (plugstack.conf "
				"runtime_path)", cfg.runtime_path, strerror(errno));
		return -1;
	}
	top = sq_dir_open_checked(AT_FDCWD, cfg.runtime_path, -1, err, sizeof(err));
	if (top < 0) {
		sq_report_error("the runtime directory: %s (plugstack.conf runtime_path)", err);
		return -1;
	}
	snprintf(name, sizeof(name), "%u", (unsigned)st.uid);
	fd = sq_dir_make_checked(top, cfg.runtime_path, name, (long)st.uid, (long)st.gid, 0700,
				 err, sizeof(err));
	close(top);
	if (fd < 0) {
		sq_report_error("the runtime directory of the job user: %s (plugstack.conf "
				"runtime_path=%s)", err, cfg.runtime_path);
		return -1;
	}
	close(fd);
	snprintf(st.runtime_dir, sizeof(st.runtime_dir), "%s/%s", cfg.runtime_path, name);
	return 0;
}

/* As root: local_cache/ (root's, 0755) then local_cache/UID (the user's, 0700), where the
 * user's own extracted images go (extracted.h), made and checked as the runtime directory
 * is. Without it, steps read from squashfuse. */
static void make_cache_dir(void)
{
	char err[PATH_MAX + 256], name[16];
	int top, fd;

	st.cache_dir[0] = '\0';
	if (cfg.local_cache_gb <= 0)
		return;
	if (mkdir(cfg.local_cache, 0755) < 0 && errno != EEXIST) {
		snprintf(err, sizeof(err), "cannot create %s: %s", cfg.local_cache,
			 strerror(errno));
		goto off;
	}
	top = sq_dir_open_checked(AT_FDCWD, cfg.local_cache, -1, err, sizeof(err));
	if (top < 0)
		goto off;
	snprintf(name, sizeof(name), "%u", (unsigned)st.uid);
	fd = sq_dir_make_checked(top, cfg.local_cache, name, (long)st.uid, (long)st.gid, 0700,
				 err, sizeof(err));
	close(top);
	if (fd < 0)
		goto off;
	close(fd);
	snprintf(st.cache_dir, sizeof(st.cache_dir), "%s/%s", cfg.local_cache, name);
	return;
off:
	slurm_info("squall: no node-local cache of extracted images: %s; steps read their "
		   "images through squashfuse (plugstack.conf local_cache)", err);
}

static int post_opt_remote(spank_t sp)
{
	char err[512], warn[512];
	char **job_env = NULL;
	int r;

	if (spank_get_item(sp, S_JOB_STEPID, &st.stepid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ID, &st.jobid) != ESPANK_SUCCESS)
		return 0;  /* not a step with tasks */
	if (st.stepid == SQ_STEP_EXTERN)
		return 0;
	if (spank_get_item(sp, S_JOB_NODEID, &st.nodeid) != ESPANK_SUCCESS)
		st.nodeid = 0;
	if (spank_get_item(sp, S_JOB_UID, &st.uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_GID, &st.gid) != ESPANK_SUCCESS) {
		/* Never run a container step on the host because an item was missing. */
		if (sq_args.image != NULL || sq_args.name != NULL) {
			st.active = 1;
			fail("slurmstepd did not give the job's user and group ids: cannot start "
			     "the container (report this with the Slurm version)");
		}
		return 0;
	}
	if (st.stepid == SQ_STEP_BATCH && !cfg.sbatch_support)
		return 0;
	spank_get_item(sp, S_JOB_ENV, &job_env);
	if (sq_args_load_env(job_env, err, sizeof(err)) < 0) {
		st.active = 1;
		fail(err);
		return 0;
	}
	if (sq_args_error() != NULL) {
		st.active = 1;
		fail(sq_args_error());
		return 0;
	}
	r = sq_opts_check(&sq_args, warn, sizeof(warn), err, sizeof(err));
	if (r == 0)
		return 0;
	st.active = 1;
	if (r < 0) {
		fail(err);
		return 0;
	}
	st.verbose = (sq_args.log != SQ_LOG_UNSET ? sq_args.log : cfg.log) == SQ_LOG_VERBOSE;
	st.entrypoint_log = sq_args.entrypoint_log == 1;
	if (sq_cred_init(&st.cred_root, st.uid, st.gid, err, sizeof(err)) < 0) {
		fail(err);
		return 0;
	}
	if (make_runtime_dir() < 0)
		st.failed = 1;
	make_cache_dir();
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		return post_opt_local();
	case S_CTX_REMOTE:
		return post_opt_remote(sp);
	default:
		return 0;
	}
}

/* Names the user set in the job environment among the variables an EFA plan sets. */
static char *efa_user_set(char *const job_env[])
{
	char *csv = NULL;
	size_t len = 0;

	for (int i = 0; sq_efa_var_name(i) != NULL; i++) {
		const char *name = sq_efa_var_name(i);
		size_t nl = strlen(name);
		for (size_t j = 0; job_env != NULL && job_env[j] != NULL; j++) {
			if (strncmp(job_env[j], name, nl) == 0 && job_env[j][nl] == '=') {
				char *grown = realloc(csv, len + nl + 2);
				if (grown == NULL)
					return csv;
				csv = grown;
				if (len)
					csv[len++] = ',';
				memcpy(csv + len, name, nl + 1);
				len += nl;
				break;
			}
		}
	}
	return csv;
}

/* One more line for local task 0 to print. */
static void add_warning(const char *line)
{
	size_t n = strlen(st.warnings);

	if (line == NULL || *line == '\0')
		return;
	snprintf(st.warnings + n, sizeof(st.warnings) - n, "%s%s", n ? "\n" : "", line);
}

/* Fill the conf file's parts: --container-env values, EFA environment and hook, mounts,
 * and Pyxis's entrypoint skip (rc.local). */
static int build_conf(char *const job_env[], const char *cwd, const char *batch_script,
		      struct sq_conf_spec *spec, char ***env_lines, char ***mount_lines,
		      char ***hook_argv)
{
	struct sq_efa_roots roots = { cfg.efa_sysfs_root, cfg.efa_dev_root, cfg.efa_opt_root };
	struct sq_efa_request req;
	struct sq_efa_plan plan;
	struct sq_efa_node node;
	struct sq_mount_list mounts = { 0 };
	char err[1024], *user_set, **keep = NULL;
	size_t ne = 0, nm = 0;

	if (batch_script != NULL) {
		/* The batch script lives in slurmd's spool directory on the host: bind it
		 * read-only at the same path so Slurm can exec it inside the container. */
		char spec[PATH_MAX * 2 + 8];
		snprintf(spec, sizeof(spec), "%s:%s:ro", batch_script, batch_script);
		if (sq_mounts_parse(spec, NULL, &mounts, err, sizeof(err)) < 0) {
			char msg[1200];
			snprintf(msg, sizeof(msg), "cannot bind the batch script: %s", err);
			fail(msg);
			return -1;
		}
		for (size_t i = 0; i < mounts.count; i++)
			sq_line_append(mount_lines, &nm, mounts.items[i].fstab);
		sq_mounts_free(&mounts);
	}
	if (sq_args.mounts != NULL) {
		if (sq_mounts_parse(sq_args.mounts, cwd, &mounts, err, sizeof(err)) < 0 ||
		    sq_mounts_check_sources(&mounts, err, sizeof(err)) < 0) {
			sq_mounts_free(&mounts);
			fail(err);
			return -1;
		}
		for (size_t i = 0; i < mounts.count; i++)
			sq_line_append(mount_lines, &nm, mounts.items[i].fstab);
		sq_mounts_free(&mounts);
	}

	/* --container-env: the entrypoint and the runtime's hooks see the host's values. */
	if (sq_env_keep_lines(job_env, sq_args.env, &keep, err, sizeof(err)) < 0) {
		fail(err);
		return -1;
	}
	for (size_t i = 0; keep[i] != NULL; i++)
		sq_line_append(env_lines, &ne, keep[i]);
	sq_env_free(keep);

	memset(&req, 0, sizeof(req));
	req.mode = sq_args.efa != SQ_EFA_SETTING_UNSET ? sq_args.efa : cfg.efa;
	req.nccl_debug = sq_args.nccl_debug;
	user_set = efa_user_set(job_env);
	req.user_set = user_set;
	if (sq_efa_detect(&roots, &node, err, sizeof(err)) < 0 ||
	    sq_efa_plan(&node, NULL, &req, &plan, err, sizeof(err)) < 0) {
		free(user_set);
		fail(err);
		return -1;
	}
	sq_lines_append(env_lines, &ne, plan.env);
	sq_lines_append(mount_lines, &nm, plan.fstab);
	if (plan.warnings && plan.warnings[0])
		add_warning(plan.warnings);
	if (plan.active)
		*hook_argv = sq_efa_hook_argv(SQ_LIBEXEC_DIR "/squall-efa-hook", &roots, &req);
	sq_efa_plan_free(&plan);
	free(user_set);

	spec->env = ne ? (const char *const *)*env_lines : NULL;
	spec->mounts = nm ? (const char *const *)*mount_lines : NULL;
	spec->hook_argv = (const char *const *)*hook_argv;
	/* Without --container-entrypoint, as Pyxis: the image's /etc/rc runs (its `cd
	 * WORKDIR` too) and only the entrypoint is skipped, through rc.local. */
	spec->skip_entrypoint =
		(sq_args.entrypoint >= 0 ? sq_args.entrypoint : cfg.execute_entrypoint) == 0;
	return 0;
}

/* A marker that tells the job epilog this job made named containers on the node. */
static void mark_job_names(void)
{
	char path[PATH_MAX + 64];
	int fd;

	snprintf(path, sizeof(path), "%s/job%u.names", st.runtime_dir, (unsigned)st.jobid);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd >= 0)
		close(fd);
}

/* Flags that only shape a container being started: joining one, they cannot apply. */
static void warn_ignored_on_join(const char *joined)
{
	static const struct { int id; const char *flag; } shaping[] = {
		{ SQ_OPT_MOUNTS, "--container-mounts" },
		{ SQ_OPT_MOUNT_HOME, "--[no-]container-mount-home" },
		{ SQ_OPT_REMAP_ROOT, "--[no-]container-remap-root" },
		{ SQ_OPT_ENTRYPOINT, "--[no-]container-entrypoint" },
		{ SQ_OPT_WRITABLE, "--container-writable/readonly" },
		{ SQ_OPT_EFA, "--container-efa" },
		{ SQ_OPT_NCCL_DEBUG, "--container-nccl-debug" },
	};
	char list[512] = "", line[1024];
	size_t n = 0;

	for (size_t i = 0; i < sizeof(shaping) / sizeof(shaping[0]); i++)
		if (sq_args.source[shaping[i].id] != SQ_SRC_NONE)
			n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", n ? ", " : "",
					      shaping[i].flag);
	if (n && n < sizeof(list)) {
		snprintf(line, sizeof(line), "squall: warning: --container-name=%s joined the "
			 "container that runs on this node (%s): %s did not apply (they were set "
			 "when it started)", sq_args.name, joined, list);
		add_warning(line);
	}
}

/* --container-unshare when joining a running container: it must have those namespaces. */
static int check_joined_unshare(void)
{
	char want[32], err[512];
	int missing = sq_args.unshare & ~sq_nsholder_mask(&st.holder);

	if (missing == 0)
		return 0;
	snprintf(err, sizeof(err), "--container-unshare=%s: the running container of "
		 "--container-name=%s is not in a separate %s namespace (it was started without "
		 "it): drop --container-unshare to join it, or start the container with it",
		 sq_unshare_str(sq_args.unshare, want, sizeof(want)), sq_args.name,
		 missing & SQ_NS_NET ? "network" : missing & SQ_NS_IPC ? "IPC" : "UTS");
	fail(err);
	return -1;
}

/* Join the container (and its unshared namespaces) whose first process is pid.
 * 1 joined, 0 it is gone (start one), -1 failed (error kept). */
static int attach_container(const char *runtime_name, pid_t pid, unsigned long long start,
			    pid_t nspid, unsigned long long nsstart)
{
	char err[1024], msg[1200];
	int r;

	r = sq_container_attach(&st.ctr, pid, start, err, sizeof(err));
	if (r == 1) {
		sq_running_forget(st.runtime_dir, runtime_name, pid);
		return 0;
	}
	if (r == 0 && nspid > 0) {
		r = sq_nsholder_attach(&st.holder, nspid, nsstart, st.ctr.ns_user, err,
				       sizeof(err));
		if (r == 1) {
			r = -1;
			snprintf(err, sizeof(err), "the process holding its unshared namespaces "
				 "(--container-unshare) is gone");
		}
	}
	if (r < 0) {
		snprintf(msg, sizeof(msg), "--container-name=%s: cannot join the container that "
			 "runs on this node: %s", sq_args.name, err);
		sq_container_stop(&st.ctr);
		fail(msg);
		return -1;
	}
	if (check_joined_unshare() < 0)
		return -1;
	if ((st.target = strdup(runtime_name)) == NULL) {
		fail("out of memory");
		return -1;
	}
	warn_ignored_on_join(runtime_name);
	return 1;
}

/* --container-name NAME (auto) or NAME:exec: join the instance another step runs on this
 * node. 1 joined, 0 none (start one), -1 failed (error kept). */
static int join_running(void)
{
	char err[1024], warn[1024];
	unsigned long long start = 0, nsstart = 0;
	pid_t pid = -1, nspid = 0;
	int r;

	r = sq_named_find_running(st.runtime_dir, st.run_name, sq_args.name, sq_args.name_mode,
				  cfg.container_name_strict, sq_args.image,
				  sq_args.image ? st.image.identity : NULL, &pid, &start, &nspid,
				  &nsstart, warn, sizeof(warn), err, sizeof(err));
	if (r <= 0) {
		if (r < 0)
			fail(err);
		return r;
	}
	add_warning(warn);
	r = attach_container(st.run_name, pid, start, nspid, nsstart);
	if (r == 0 && sq_args.name_mode == SQ_NAME_EXEC) {
		sq_named_exec_none(sq_args.name, err, sizeof(err));
		fail(err);
		return -1;
	}
	return r;
}

/* A step served by the job's kept container (kept.h) runs in a layer of its own: join that
 * layer's mount namespace, through one of the step's processes, as its tasks see it.
 * 1 joined (or the step had no layer), -1 failed (error kept). */
static int attach_step_layer(uint32_t jobid, uint32_t stepid)
{
	unsigned long long dev, ino;
	char err[512];
	long pid;

	if (sq_layer_read(st.runtime_dir, jobid, stepid, &dev, &ino) < 0)
		return 1;
	pid = sq_mntns_find(dev, ino, (long)st.uid);
	if (pid < 0 || sq_container_use_layer(&st.ctr, (pid_t)pid, err, sizeof(err)) < 0) {
		snprintf(err, sizeof(err), "--container-name=%s: step %u.%u runs no task in its "
			 "container on this node any more", sq_args.name, (unsigned)jobid,
			 (unsigned)stepid);
		fail(err);
		return -1;
	}
	return 1;
}

/* --container-name=JOBID.STEPID: the running container of that step, as Pyxis attaches to
 * an unnamed container (srun --overlap). 1 joined, -1 failed (error kept). */
static int attach_step(uint32_t jobid, uint32_t stepid)
{
	char name[64], err[512];
	unsigned long long start, nsstart;
	pid_t pid, nspid;

	sq_named_step_name(jobid, stepid, name, sizeof(name));
	if (sq_running_live(st.runtime_dir, name) &&
	    sq_running_read_ns(st.runtime_dir, name, &pid, &start, &nspid, &nsstart) == 0 &&
	    attach_container(name, pid, start, nspid, nsstart) != 0)
		return st.failed ? -1 : attach_step_layer(jobid, stepid);
	if (st.failed)
		return -1;
	snprintf(err, sizeof(err), "--container-name=%s: step %u.%u runs no container of yours on "
		 "this node (give a running step's JOBID.STEPID, with srun --overlap)", sq_args.name,
		 (unsigned)jobid, (unsigned)stepid);
	fail(err);
	return -1;
}

/* The image: a file, or a registry reference through the site's importer, `enroot load`
 * (use_enroot_load) or sqshbuild's shared cache. 0 ok, -1 failed (error kept). */
static int resolve_image(const char *cwd, const struct sq_cred *cred)
{
	struct sq_image_env ienv = { cwd, cfg.sqshbuild, cfg.image_cache, st.runtime_env, cred };
	struct sq_image_ref ref;
	char err[8192];
	int registry;

	if (sq_imgref_parse(sq_args.image, &ref, err, sizeof(err)) < 0) {
		sq_imgref_free(&ref);
		fail(err);
		return -1;
	}
	registry = ref.kind != SQ_IMAGE_FILE;
	sq_imgref_free(&ref);
	if (registry && cfg.importer != NULL) {
		/* Pulled when a file is needed (fetch_image): not for a named container that
		 * exists already, as Pyxis skips the import then. */
		char keyed[PATH_MAX + 16];
		if (sq_importer_setup(&st.importer, cfg.importer, st.runtime_env, cfg.runtime_path,
				      st.uid, st.jobid, st.stepid, cred, err, sizeof(err)) < 0) {
			fail(err);
			return -1;
		}
		snprintf(keyed, sizeof(keyed), "importer:%s", sq_args.image);
		sq_hash_hex(keyed, strlen(keyed), st.image.identity);
		st.image.from_registry = 1;
		return 0;
	}
	if (registry && cfg.use_enroot_load) {
		char keyed[PATH_MAX + 16];
		st.load_uri = sq_enroot_uri(sq_args.image);
		if (st.load_uri == NULL) {
			fail("out of memory");
			return -1;
		}
		snprintf(keyed, sizeof(keyed), "enroot-load:%s", st.load_uri);
		sq_hash_hex(keyed, strlen(keyed), st.image.identity);
		return 0;
	}
	if (sq_image_resolve(sq_args.image, &ienv, &st.image, err, sizeof(err)) < 0) {
		fail(err);
		return -1;
	}
	return 0;
}

/* The importer's `get`, once a file is needed. 0 ok, -1 failed (error kept). */
static int fetch_image(void)
{
	char err[8192], what[PATH_MAX + 64], identity[17];

	if (st.image.path != NULL || st.importer.envp == NULL)
		return 0;
	if (sq_importer_get(&st.importer, sq_args.image, &st.image.path, err, sizeof(err)) < 0)
		return fail(err), -1;
	snprintf(what, sizeof(what), "--container-image=%s (from the importer: %s)",
		 sq_args.image, st.image.path);
	/* The identity stays the reference's: the file's name is the importer's business. */
	if (sq_image_check_file(what, st.image.path, identity, err, sizeof(err)) < 0)
		return fail(err), -1;
	return 0;
}

/* The runtime and the environment it runs with (fixed PATH). 0 ok, -1 (error kept). */
static int prepare_runtime(char *const job_env[])
{
	char err[PATH_MAX * 2], path[PATH_MAX * 2 + 8], rt_dir[PATH_MAX + 16];

	if (cfg.enroot != NULL)
		st.enroot = strdup(cfg.enroot);
	else if (sq_find_enroot(&st.enroot, err, sizeof(err)) < 0)
		return fail(err), -1;
	if (st.enroot == NULL)
		return fail("out of memory"), -1;
	if (sq_runtime_path(st.enroot, path, sizeof(path)) < 0)
		return fail("the runtime's PATH is too long (slurmstepd's PATH)"), -1;
	if (sq_stepconf_env(job_env, &sq_args, st.runtime_dir, path, &st.runtime_env, err,
			    sizeof(err)) < 0)
		return fail(err), -1;
	snprintf(rt_dir, sizeof(rt_dir), "%s/enroot", st.runtime_dir);
	if (mkdir(rt_dir, 0700) < 0 && errno != EEXIST) {
		snprintf(err, sizeof(err), "cannot create %s: %s (plugstack.conf runtime_path)",
			 rt_dir, strerror(errno));
		return fail(err), -1;
	}
	if (access(st.enroot, X_OK) < 0) {
		snprintf(err, sizeof(err), "container runtime not found: %s is not executable on "
			 "this node (%s): install Enroot or fix enroot= in plugstack.conf",
			 st.enroot, strerror(errno));
		return fail(err), -1;
	}
	return 0;
}

/* --container-save: relative to the job's working directory, as with Pyxis. Node 0, which
 * saves, checks the destination now, as the user: the save itself runs after the tasks
 * have exited, when Slurm no longer lets a plugin change the step's exit code. */
static int prepare_save(const char *cwd)
{
	char err[PATH_MAX * 2 + 256];

	if (sq_args.save == NULL)
		return 0;
	if (sq_args.save[0] == '/')
		st.save_path = strdup(sq_args.save);
	else if (asprintf(&st.save_path, "%s/%s", cwd, sq_args.save) < 0)
		st.save_path = NULL;
	if (st.save_path == NULL)
		return fail("out of memory"), -1;
	if (st.nodeid == 0 && sq_save_check(st.save_path, err, sizeof(err)) < 0)
		return fail(err), -1;
	return 0;
}

/* What `enroot start` gets: the named container, the step's own container (for
 * --container-save on node 0, or loaded by Enroot), or the image file. */
static int prepare_target(const struct sq_runtime *rt)
{
	char err[8192], warn[1024], msg[8300];
	int want_save = sq_args.save != NULL && st.nodeid == 0;

	if (sq_args.name != NULL) {
		struct sq_named_image img;
		if (st.importer.envp != NULL && !sq_named_exists(rt, st.run_name) && fetch_image() < 0)
			return -1;
		img = (struct sq_named_image){ sq_args.image, st.image.path, st.load_uri,
					       sq_args.image ? st.image.identity : NULL };
		if (sq_named_prepare(rt, st.runtime_dir, st.run_name, sq_args.name,
				     sq_args.name_mode, cfg.container_name_strict, &img, &st.target,
				     warn, sizeof(warn), err, sizeof(err)) < 0)
			return fail(err), -1;
		add_warning(warn);
		if (cfg.container_scope == SQ_SCOPE_JOB)
			mark_job_names();
		return 0;
	}
	if (fetch_image() < 0)
		return -1;
	if (want_save || st.load_uri != NULL) {
		int made;
		if ((st.save_container = strdup(st.step_name)) == NULL)
			return fail("out of memory"), -1;
		sq_named_remove(rt, st.save_container, err, sizeof(err));
		made = st.load_uri != NULL
		       ? sq_named_load(rt, st.save_container, st.load_uri, err, sizeof(err))
		       : sq_named_create(rt, st.save_container, st.image.path, err, sizeof(err));
		if (made < 0) {
			free(st.save_container);
			st.save_container = NULL;
			snprintf(msg, sizeof(msg), "%s%s", st.load_uri ? "" : "--container-save: ",
				 err);
			return fail(msg), -1;
		}
		st.target = strdup(st.save_container);
	} else {
		st.target = strdup(st.image.path);
	}
	return st.target ? 0 : (fail("out of memory"), -1);
}

/* --container-unshare, then the records other steps join by. */
static void after_start(void)
{
	char err[1024];

	if (sq_args.unshare) {
		if (sq_nsholder_make(&st.holder, sq_args.unshare, st.ctr.ns_user, st.ctr.pidfd,
				     st.uid, st.gid, err, sizeof(err)) < 0) {
			fail(err);
			return;
		}
	}
	if (sq_running_record(st.runtime_dir, st.step_name, st.ctr.pid, st.ctr.starttime,
			      st.holder.pid > 0 ? st.holder.pid : 0, st.holder.starttime, err,
			      sizeof(err)) < 0 ||
	    (sq_args.name != NULL &&
	     sq_running_record(st.runtime_dir, st.run_name, st.ctr.pid, st.ctr.starttime,
			       st.holder.pid > 0 ? st.holder.pid : 0, st.holder.starttime, err,
			       sizeof(err)) < 0))
		/* Later steps start their own instance instead of joining: say so. */
		slurm_info("squall: %s", err);
}

/* The job's kept container (kept.h): 1 when the step is served by it (or failed: error
 * kept), 0 when a container must be started for the step. */
static int use_kept_container(const struct sq_start_request *req, int want_save, char *err,
			      size_t errlen)
{
	struct sq_kept_step ks = {
		st.runtime_dir, st.jobid, st.stepid, st.image.path, st.image.identity,
		st.cache_dir, cfg.local_cache_gb, SQ_LAYER, SQ_KEPT_IDLE_S,
		{ cfg.container_reuse, sq_args.reuse, 0, want_save, st.stepid == SQ_STEP_BATCH,
		  (sq_args.entrypoint >= 0 ? sq_args.entrypoint : cfg.execute_entrypoint) == 1,
		  SQ_KEPT_NONE, 0 } };
	char note[1024] = "";
	int r = sq_kept_serve(&st.ctr, req, &ks, &st.served, note, sizeof(note), err, errlen);

	if (note[0])
		slurm_info("squall: %s", note);
	if (r < 0)
		fail(err);
	return r != 0;
}

static void user_init_steps(spank_t sp)
{
	struct sq_conf_spec spec = { 0 };
	struct sq_start_request req;
	struct sq_runtime rt;
	char **job_env = NULL, **env_lines = NULL, **mount_lines = NULL, **hook_argv = NULL;
	const char *batch_script = NULL;
	char err[8192], cwd[PATH_MAX], what[16];
	uint32_t attach_job, attach_step_id;

	sq_phase_begin();
	spank_get_item(sp, S_JOB_ENV, &job_env);
	if (getcwd(cwd, sizeof(cwd)) == NULL)
		snprintf(cwd, sizeof(cwd), "/");
	sq_named_step_name(st.jobid, st.stepid, st.step_name, sizeof(st.step_name));
	if (prepare_runtime(job_env) < 0 || prepare_save(cwd) < 0)
		return;
	if (access(SQ_KEEPER, X_OK) < 0 || access(SQ_LAYER, X_OK) < 0) {
		snprintf(err, sizeof(err), "%s or %s is not executable on this node (%s): "
			 "reinstall squall (make -C spank install)", SQ_KEEPER, SQ_LAYER,
			 strerror(errno));
		return fail(err);
	}

	/* 1. the image, or the container to join */
	st.cred_user = (struct sq_cred){ .uid = st.uid, .gid = st.gid };
	if (sq_args.name != NULL && sq_named_is_step(sq_args.name, &attach_job, &attach_step_id)) {
		if (attach_step(attach_job, attach_step_id) > 0)
			sq_phase_end("join running container");
		return;
	}
	if (sq_args.image != NULL && resolve_image(cwd, &st.cred_user) < 0)
		return;
	sq_phase_end("resolve image");
	if (sq_args.name != NULL) {
		int r;
		if (sq_named_runtime_name(cfg.container_scope == SQ_SCOPE_JOB, st.jobid,
					  sq_args.name, st.run_name, sizeof(st.run_name)) < 0)
			return fail("--container-name: name too long");
		r = join_running();
		if (r != 0) {
			if (r > 0)
				sq_phase_end("join running container");
			return;
		}
	}

	/* 2. the conf file */
	if (st.stepid == SQ_STEP_BATCH) {
		int argc = 0;
		char **argv = NULL;
		if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS && argc > 0 &&
		    argv[0] != NULL && argv[0][0] == '/')
			batch_script = argv[0];
	}
	if (build_conf(job_env, cwd, batch_script, &spec, &env_lines, &mount_lines,
		       &hook_argv) < 0)
		goto out;
	snprintf(st.conf_path, sizeof(st.conf_path), "%s/step-%u.%u.conf", st.runtime_dir,
		 (unsigned)st.jobid, (unsigned)st.stepid);
	unlink(st.conf_path);  /* a leftover of a killed slurmstepd with the same ids */
	if (sq_stepconf_write(st.conf_path, &spec, err, sizeof(err)) < 0) {
		st.conf_path[0] = '\0';
		fail(err);
		goto out;
	}

	/* 3. what to start */
	rt = (struct sq_runtime){ st.enroot, st.runtime_env, &st.cred_user };
	if (prepare_target(&rt) < 0)
		goto out;
	sq_phase_end("prepare");

	/* 4. start, or use the job's kept container (lifecycle.h) */
	req = (struct sq_start_request){ SQ_KEEPER, st.enroot, st.conf_path, NULL, st.target,
					 sq_args.writable, sq_args.remap_root, st.runtime_env,
					 &st.cred_user, SQ_START_TIMEOUT_S, NULL };
	/* Only a step started from the image file itself can use the kept container: not a
	 * named one, nor one created for --container-save or loaded by `enroot load`. */
	if (sq_args.name == NULL && st.save_container == NULL &&
	    use_kept_container(&req, st.save_path != NULL && st.nodeid == 0, err, sizeof(err))) {
		if (!st.failed)
			after_start();
	} else {
		if (st.served == NULL)
			st.served = sq_args.name != NULL ? "started for the step (named container)"
							 : "started for the step";
		snprintf(what, sizeof(what), "%u", (unsigned)st.stepid);
		if (sq_container_start(&st.ctr, &req, err, sizeof(err)) < 0) {
			fail(err);
		} else {
			if (sq_keeper_record(st.runtime_dir, st.jobid, what, &st.ctr.keeper, err,
					     sizeof(err)) < 0)
				/* Only the job epilog's safety net needs it: say so, go on. */
				slurm_info("squall: %s", err);
			after_start();
		}
		sq_phase_end("start container");
	}
	/* The importer's file is held open by the started container now (Pyxis's protocol
	 * calls release here, and again at the step's end). */
	if (st.importer.envp != NULL)
		sq_importer_release(&st.importer);
out:
	if (st.conf_path[0]) {
		unlink(st.conf_path);
		st.conf_path[0] = '\0';
	}
	sq_lines_free(env_lines);
	sq_lines_free(mount_lines);
	sq_efa_argv_free(hook_argv);
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_REMOTE || !st.active || st.failed)
		return 0;
	user_init_steps(sp);
	/* Errors are raised in task_init, where they reach srun. */
	return 0;
}

/* LANG, LC_ALL, LANGUAGE leave the task unless --container-env names them (env.h). */
static int unset_locale(spank_t sp, char *const task_env[])
{
	char err[256], **names = NULL;

	if (sq_env_task_unset(task_env, sq_args.env, &names, err, sizeof(err)) < 0)
		return -1;
	for (size_t i = 0; names[i] != NULL; i++)
		spank_unsetenv(sp, names[i]);
	sq_env_free(names);
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	char err[1024];
	char **task_env = NULL, **overlay = NULL;
	int local_id = 0;
	uint32_t global_id = 0;
	double t0;

	(void)ac;
	(void)av;
	if (!st.active)
		return 0;
	spank_get_item(sp, S_TASK_ID, &local_id);
	spank_get_item(sp, S_TASK_GLOBAL_ID, &global_id);
	if (st.failed) {
		if (local_id == 0)
			sq_report_flush();
		return -1;
	}
	if (local_id == 0 && st.warnings[0]) {
		size_t n = strlen(st.warnings);
		while (n > 0 && st.warnings[n - 1] == '\n')
			st.warnings[--n] = '\0';
		sq_report_now("", "%s", st.warnings);
	}
	t0 = sq_now();
	if (sq_container_join(&st.ctr, sq_args.workdir, err, sizeof(err)) < 0 ||
	    sq_nsholder_join(&st.holder, err, sizeof(err)) < 0) {
		sq_report_now("squall: error: ", "task %u: %s", (unsigned)global_id, err);
		return -1;
	}
	spank_get_item(sp, S_JOB_ENV, &task_env);
	if (unset_locale(sp, task_env) < 0 ||
	    sq_env_overlay(st.ctr.environ, st.ctr.environ_len, sq_args.env, task_env, &overlay,
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
	/* As Pyxis: unprivileged tasks run under Enroot's seccomp filter (seccomp.h). */
	if (st.uid != 0 && sq_seccomp_install(err, sizeof(err)) < 0) {
		sq_report_now("squall: error: ", "task %u: %s", (unsigned)global_id, err);
		return -1;
	}
	if (st.entrypoint_log && local_id == 0) {
		char *text = sq_capture_read(st.ctr.child.out_fd);
		char *etext = sq_capture_read(st.ctr.child.err_fd);
		if (text && write(STDERR_FILENO, text, strlen(text)) < 0) {
			/* best effort */
		}
		if (etext && write(STDERR_FILENO, etext, strlen(etext)) < 0) {
			/* best effort */
		}
		free(text);
		free(etext);
	}
	if (st.verbose && local_id == 0) {
		char host[128] = "";
		gethostname(host, sizeof(host) - 1);
		sq_report_now("squall: ", "timings on %s (%s): %s, join %.1f ms", host,
			      st.served ? st.served : "started", sq_phase_text(),
			      (sq_now() - t0) * 1000.0);
	}
	return 0;
}

/* Stop the step's container; one this step started is no longer there to join. */
static void stop_container(void)
{
	int owned = st.ctr.owned, kept = st.ctr.kept;
	char what[16];

	if (owned || kept) {
		sq_running_forget(st.runtime_dir, st.step_name, st.ctr.pid);
		if (owned && sq_args.name != NULL && st.run_name[0])
			sq_running_forget(st.runtime_dir, st.run_name, st.ctr.pid);
	}
	sq_container_stop(&st.ctr);
	sq_nsholder_release(&st.holder);
	snprintf(what, sizeof(what), "%u", (unsigned)st.stepid);
	if (owned)
		sq_keeper_forget(st.runtime_dir, st.jobid, what);
	if (kept)
		sq_layer_forget(st.runtime_dir, st.jobid, st.stepid);
}

/* The importer's `release`, the second time (Pyxis's protocol), then forget it. As root
 * (after the tasks), it runs as the user with the user's groups. */
static void release_importer(void)
{
	if (st.importer.envp == NULL)
		return;
	st.importer.cred = &st.cred_root;
	sq_importer_release(&st.importer);
	sq_importer_free(&st.importer);
}

/* --container-save, once per step: on node 0, after its last task. The container's files
 * are on disk (a created container), so its stopped first process does not matter. */
static int save_container(void)
{
	struct sq_runtime rt = { st.enroot, st.runtime_env, &st.cred_root };
	const char *container = st.save_container ? st.save_container : st.target;
	char err[1024];

	if (st.save_path == NULL || st.nodeid != 0 || st.failed || st.saved || container == NULL)
		return 0;
	st.saved = 1;
	if (sq_save_export(&rt, container, st.save_path, st.jobid, st.stepid, err,
			   sizeof(err)) < 0) {
		slurm_error("squall: --container-save=%s: %s", st.save_path, err);
		return -1;
	}
	slurm_info("squall: saved the container to %s", st.save_path);
	return 0;
}

/* When the node's last task has exited: the save, then what the step made for itself (its
 * own container, the importer's file). Done here rather than in exit because Slurm kills
 * every process left in the step (ours included) once the tasks are gone. */
static int finish_after_last_task(spank_t sp)
{
	static uint32_t exited;
	uint32_t local_tasks = 0;
	struct sq_runtime rt = { st.enroot, st.runtime_env, &st.cred_root };
	char err[1024];
	int rc;

	if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &local_tasks) != ESPANK_SUCCESS ||
	    ++exited < local_tasks)
		return 0;
	rc = save_container();
	/* The step's own container is not needed any more: stop it (the runtime refuses to
	 * remove a running one) and remove it now. */
	if (st.save_container != NULL) {
		stop_container();
		if (sq_named_remove(&rt, st.save_container, err, sizeof(err)) == 0) {
			free(st.save_container);
			st.save_container = NULL;
		} else {
			slurm_error("squall: cannot remove the step's container %s: %s",
				    st.save_container, err);
		}
	}
	release_importer();
	return rc;
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() == S_CTX_REMOTE && st.active)
		return finish_after_last_task(sp);
	return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	char err[1024];

	(void)sp;
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_REMOTE || !st.active)
		return 0;
	stop_container();
	if (st.conf_path[0])
		unlink(st.conf_path);
	if (st.save_container != NULL) {
		struct sq_runtime rt = { st.enroot, st.runtime_env, &st.cred_root };
		if (sq_named_remove(&rt, st.save_container, err, sizeof(err)) < 0)
			slurm_error("squall: cannot remove the step's container %s: %s",
				    st.save_container, err);
	}
	release_importer();
	sq_env_free(st.runtime_env);
	st.runtime_env = NULL;
	free(st.target);
	free(st.save_container);
	free(st.enroot);
	free(st.save_path);
	free(st.load_uri);
	st.target = st.save_container = st.enroot = st.save_path = st.load_uri = NULL;
	sq_image_free(&st.image);
	sq_cred_free(&st.cred_root);
	return 0;
}

/* The user's runtime directory for the job epilog, as root: runtime_path (root's) and
 * runtime_path/UID opened O_NOFOLLOW|O_DIRECTORY and checked; -1 when there is none (no
 * container step ran here) or it is refused (a line in slurmd's log). */
static int epilog_runtime_dir(uint32_t jobid, uid_t uid)
{
	char err[PATH_MAX + 256], name[16];
	int top, fd;

	top = sq_dir_open_checked(AT_FDCWD, cfg.runtime_path, -1, err, sizeof(err));
	if (top < 0) {
		if (errno != ENOENT)
			slurm_error("squall: job %u: %s (plugstack.conf runtime_path)",
				    (unsigned)jobid, err);
		return -1;
	}
	snprintf(name, sizeof(name), "%u", (unsigned)uid);
	fd = sq_dir_open_checked(top, name, (long)uid, err, sizeof(err));
	if (fd < 0 && errno != ENOENT)
		slurm_error("squall: job %u: %s/%s", (unsigned)jobid, cfg.runtime_path, err);
	close(top);
	return fd;
}

/* A container whose step could not stop it (slurmstepd killed, and its keeper with it)
 * is ended here, from the records its steps left (keeper.h), and the records a killed
 * slurmstepd could not remove go (running.h). */
static void epilog_end_containers(int dirfd_, uint32_t jobid, uid_t uid)
{
	int n;

	n = sq_keeper_sweep_job(dirfd_, jobid, uid);
	if (n > 0)
		slurm_info("squall: job %u: ended %d container(s) its steps left running",
			   (unsigned)jobid, n);
	sq_running_sweep_job(dirfd_, jobid, cfg.container_scope == SQ_SCOPE_JOB);
}

/* slurmd, as root, after the job: remove the job's named containers, pyxis_JOBID_*
 * (container_scope=job). Only nodes where a step left the marker run the runtime at all. */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	char marker[PATH_MAX], prefix[64], err[512], buf[4096], dir[PATH_MAX];
	char home[PATH_MAX + 8], user[300], runtime[PATH_MAX + 32], path[PATH_MAX * 2 + 16];
	char *enroot = NULL;
	struct passwd pw, *res = NULL;
	struct sq_cred cred;
	struct stat mst;
	uint32_t jobid;
	uid_t uid;
	int rtfd;

	/* Slurm does not call slurm_spank_init before the job epilog: read the
	 * plugstack arguments here. */
	if (!cfg_ready) {
		if (sq_config_parse(&cfg, ac, av, err, sizeof(err)) < 0) {
			slurm_error("squall: %s", err);
			return -1;
		}
		cfg_ready = 1;
	}
	if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS) {
		slurm_error("squall: job epilog: no job id or user id from Slurm");
		return 0;
	}
	rtfd = epilog_runtime_dir(jobid, uid);
	if (rtfd < 0)
		return 0;
	epilog_end_containers(rtfd, jobid, uid);
	snprintf(marker, sizeof(marker), "job%u.names", (unsigned)jobid);
	if (cfg.container_scope != SQ_SCOPE_JOB ||
	    fstatat(rtfd, marker, &mst, AT_SYMLINK_NOFOLLOW) < 0) {
		close(rtfd);
		return 0;
	}
	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) != 0 || res == NULL ||
	    sq_cred_init(&cred, uid, pw.pw_gid, err, sizeof(err)) < 0) {
		slurm_error("squall: job %u: cannot look up user %u to remove its containers",
			    (unsigned)jobid, (unsigned)uid);
		close(rtfd);
		return 0;
	}
	if (cfg.enroot != NULL)
		enroot = strdup(cfg.enroot);
	else if (sq_find_enroot(&enroot, err, sizeof(err)) < 0)
		slurm_error("squall: job %u: %s", (unsigned)jobid, err);
	snprintf(dir, sizeof(dir), "%s/%u", cfg.runtime_path, (unsigned)uid);
	snprintf(home, sizeof(home), "HOME=%s", pw.pw_dir);
	snprintf(user, sizeof(user), "USER=%s", pw.pw_name);
	snprintf(runtime, sizeof(runtime), "ENROOT_RUNTIME_PATH=%s/enroot", dir);
	snprintf(path, sizeof(path), "PATH=");
	if (sq_runtime_path(enroot, path + 5, sizeof(path) - 5) < 0)
		snprintf(path, sizeof(path), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
			 "/sbin:/bin");
	char *envp[] = { path, home, user, runtime, NULL };
	struct sq_runtime rt = { enroot, envp, &cred };
	snprintf(prefix, sizeof(prefix), "pyxis_%u_", (unsigned)jobid);
	if (enroot != NULL && sq_named_remove_prefix(&rt, dir, prefix, err, sizeof(err)) < 0)
		slurm_error("squall: job %u: removing its containers: %s", (unsigned)jobid, err);
	unlinkat(rtfd, marker, 0);
	close(rtfd);
	free(enroot);
	sq_cred_free(&cred);
	return 0;
}

int slurm_spank_slurmd_exit(spank_t sp, int ac, char **av)
{
	(void)sp;
	(void)ac;
	(void)av;
	if (cfg_ready)
		sq_config_free(&cfg);
	return 0;
}
