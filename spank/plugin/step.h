/*
 * step.h: one container step in slurmstepd, phase by phase (step.c, join.c, step_end.c).
 *
 *   sq_step_post_opt   init_post_opt, as root: is this a container step; the ids, the
 *                      per-user runtime directory and node-local cache
 *   sq_step_user_init  user_init, as the user: prepare (runtime, --container-save),
 *                      resolve the image, or join a container another step runs (join.c),
 *                      configure (the conf file), then start a container for the step or
 *                      use the job's kept one (kept.h, as sq_life_decide rules)
 *   sq_step_task_init  task_init, in each task: join the container, take its environment
 *   sq_step_task_exit  after the node's last task: --container-save, the step's own
 *                      container and the importer's file go (step_end.c)
 *   sq_step_exit       exit: count the step in the node's metrics (promfile.h), stop
 *                      the container, free the step
 *
 * Every phase gets the step it works on: spank_squall.c holds the one instance a
 * slurmstepd has, since SPANK callbacks carry no data of their own. An error found before
 * the tasks is kept (sq_report_fail, report.h) and raised by task_init, where it reaches
 * srun.
 */
#ifndef SQUALL_PLUGIN_STEP_H
#define SQUALL_PLUGIN_STEP_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include <slurm/spank.h>

#include "config.h"
#include "container.h"
#include "datasets.h"
#include "image.h"
#include "importer.h"
#include "nsholder.h"
#include "options.h"
#include "runcmd.h"

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
/* Holds the runtime outside slurmstepd's process tree (keeper_client.h). */
#define SQ_KEEPER SQ_LIBEXEC_DIR "/squall-keeper"
/* Makes a step's fresh layer on the job's kept container (kept.h). */
#define SQ_LAYER SQ_LIBEXEC_DIR "/squall-layer"
/* A kept container no step has used for this long ends (the epilog ends it sooner). */
#define SQ_KEPT_IDLE_S 600
/* Seconds between the lines that say how far an image pull is (image.h progress_s). */
#define SQ_PROGRESS_EVERY_S 5

struct sq_save_shared;

/* Everything one slurmstepd knows about its step. */
struct sq_step {
	const struct sq_config *cfg;   /* plugstack.conf */
	struct sq_opts *opt;           /* the user's flags (args.h) */
	int active;            /* the step runs in a container */
	uid_t uid;
	gid_t gid;
	uint32_t jobid, stepid, nodeid;
	uint32_t total_tasks;  /* the step's tasks on all nodes (0: not known) */
	struct sq_cred cred_root;   /* for calls made as root (exit): with the groups */
	struct sq_cred cred_user;   /* for calls made as the user (user_init) */
	char runtime_dir[PATH_MAX];
	char conf_path[PATH_MAX + 64];
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
	int pmix;                   /* Slurm's mpi/pmix runs the step (pmix.h) */
	char *const *job_env;       /* user_init only: the job's environment (S_JOB_ENV) */
	struct sq_datasets datasets;   /* --container-mounts' squashfs files (datasets.h) */
	int saved;                  /* --container-save done */
	struct sq_save_shared *save_shm;   /* node 0's tasks and slurmstepd (step_end.c) */
	uint32_t exited;            /* tasks of this node that have exited */
	const char *served;         /* how the step got its container, for the verbose log */
	char served_text[256];      /* its words when they are made for the step */
	char cache_dir[PATH_MAX];   /* the user's node-local cache of extracted images, or "" */
	int stage;                  /* how far user_init got (enum sq_metrics_stage) */
	int join_fd[2];             /* local task 0's join time to slurmstepd (promfile.h) */
	int build;                  /* sqshbuild ran: 1 ok, 0 failed; -1 it did not run */
	double build_s;             /* how long it ran */
};

/* An empty step over cfg and the user's flags. */
void sq_step_init(struct sq_step *s, const struct sq_config *cfg, struct sq_opts *opt);

/* The phases, in the order Slurm calls them. Errors are kept (sq_report_fail) except in
 * sq_step_task_init, which says them on the task's stderr and returns -1. */
void sq_step_post_opt(struct sq_step *s, spank_t sp);
void sq_step_user_init(struct sq_step *s, spank_t sp);
int sq_step_task_init(struct sq_step *s, spank_t sp);
int sq_step_task_exit(struct sq_step *s, spank_t sp);
void sq_step_exit(struct sq_step *s);

/* The job prolog's start of the job's container (prestart.h), on a step made with
 * sq_step_init whose ids are set: as root, the runtime directory and node-local cache
 * (0, or -1 with the error kept); then as the user, prepared, resolved and configured as
 * a step is, the job's kept container started without a layer, notify_fd told once its
 * lock is held (0 started or running, -1 with the error kept; 1 the steps would not keep
 * it for the job, said as an error unless quiet). kept.c writes the job's marker
 * (prestart_mark.h) before it takes the lock. */
int sq_step_prestart_dirs(struct sq_step *s);
int sq_step_prestart(struct sq_step *s, char *const job_env[], const char *cwd,
		     int notify_fd, int quiet);
/* join.c: --container-name=JOBID.STEPID, the running container of that step. 1 joined,
 * -1 failed (error kept). */
int sq_step_attach_step(struct sq_step *s, uint32_t jobid, uint32_t stepid);
/* join.c: --container-name NAME (auto) or NAME:exec, the instance another step runs on
 * this node. 1 joined, 0 none (start one), -1 failed (error kept). */
int sq_step_join_named(struct sq_step *s);

/* step_end.c: stop the step's container; one this step started is no longer there to
 * join. */
void sq_step_stop_container(struct sq_step *s);

/* --container-save on node 0: the memory its tasks and slurmstepd share, made in user_init
 * (0, or -1 with the error kept); in task_init, before the task joins the container, the
 * guard that saves after the node's last task and exits with its status (step_end.c);
 * once the task has joined, that it started. */
int sq_step_save_prepare(struct sq_step *s);
void sq_step_save_guard(struct sq_step *s, spank_t sp);
void sq_step_save_started(struct sq_step *s);

#endif
