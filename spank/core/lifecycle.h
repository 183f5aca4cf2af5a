/*
 * lifecycle.h: what a step does with the node's container -- start one for itself, or be
 * served by the job's kept container -- decided once per step from the step's own facts,
 * so that the rule is in one place and unit-tested (as sq_efa_plan is for EFA). Whether
 * the kept container already runs is not a fact of the decision: the kept path finds it or
 * starts it under its lock (kept.c), where the answer cannot change before it acts.
 *
 * A kept container: the first step of a job on a node starts the runtime and keeps it for
 * the job; later steps with the same image and shaping flags (the same key) reuse its image
 * mount and the runtime's setup. Every step, the first included, runs in a layer of its own
 * on top of it: a fresh writable root (an overlay with an empty upper layer) and fresh
 * tmpfs mounts, so what one unnamed step writes, the next does not see, as with Pyxis.
 * Named containers keep their own semantics (reused by name, joined while running), a
 * node that saves the container (--container-save) needs one made for the step, the batch
 * step runs once, and an image's entrypoint (--container-entrypoint) runs when its
 * container starts, so once per step: those start a container for the step, as does
 * everything when
 * reuse is off (plugstack container_reuse=0, or --no-container-reuse).
 */
#ifndef SQUALL_CORE_LIFECYCLE_H
#define SQUALL_CORE_LIFECYCLE_H

#include <stddef.h>

enum sq_life_action {
	SQ_LIFE_START_STEP = 1,   /* start a container for this step; it ends with the step */
	SQ_LIFE_KEPT = 2,         /* the job's kept container (found or started), a fresh layer
				   * for the step on it */
};

struct sq_life_input {
	int reuse;         /* plugstack container_reuse: 1 (default) or 0 */
	int flag;          /* --[no-]container-reuse: -1 not given, 0 no, 1 yes */
	int named;         /* --container-name given */
	int save;          /* the step has a container made for it: this node saves it at step
			    * end (--container-save), or Enroot loads the image (use_enroot_load) */
	int batch;         /* the batch step */
	int entrypoint;    /* the image's entrypoint runs (--container-entrypoint): at each start */
};

struct sq_life_plan {
	int action;        /* enum sq_life_action */
	const char *why;   /* static text for --container-log=verbose */
};

/* Fill plan from in. 0 ok; -1 when in holds an out-of-range value (plan: start a
 * container for the step, why says which field). */
int sq_life_decide(const struct sq_life_input *in, struct sq_life_plan *plan);

/* 1 for variables that differ between two steps of one job without changing what the
 * runtime sets up (step id, srun's ports and addresses): they are left out of the key. */
int sq_life_env_step_specific(const char *name);

/* 1 for the variables that say how many tasks a step runs and where (SLURM_NTASKS,
 * SLURM_STEP_NODELIST, SLURM_CPU_BIND_*, ...): out of the key unless a hook reads them. */
int sq_life_env_task_shape(const char *name);

/* 1 when the hooks' text (every hook the runtime runs, concatenated) names the variable
 * or a prefix of it longer than "SLURM_" (a hook that copies every SLURM_* variable reads
 * nothing a task does not get from its own step); 1 when hooks is NULL (not known). */
int sq_life_hooks_read(const char *hooks, const char *name);

/* 1 for the variables a container's start reads, so that a container started with
 * another value (or without it) is not the one a step asked for: Enroot's own settings
 * (ENROOT_*), and those the hooks' text names (a whole word, or a prefix ending in '_'
 * such as NVIDIA_REQUIRE_; SLURM_* as sq_life_hooks_read), but not the step-specific and
 * task-shape ones nor those every process has and each task gets from its own step
 * (PATH, HOME, LD_LIBRARY_PATH, ...) or from the job (SLURM_JOB_UID, ...). hooks NULL
 * (not known): ENROOT_* only. */
int sq_life_env_runtime_reads(const char *hooks, const char *name);

/* Does a container started with environment a serve a step whose runtime environment is
 * b? 1 when a variable the start reads (sq_life_env_runtime_reads) is set in one and not
 * the other or to another value, its name copied to name[namelen]; 0 when none is. */
int sq_life_env_differs(char *const a[], char *const b[], const char *hooks, char *name,
			size_t namelen);

/* The key of a kept container, 32 hex digits and a NUL: a hash of parts (NULL-terminated:
 * image, identity, start flags, conf and rc text, ...) and of the runtime's environment
 * (env, NULL-terminated "KEY=VALUE"; order does not matter; step-specific variables are
 * left out, and so are the task-shape ones no hook reads: hooks as for
 * sq_life_hooks_read). -1 only when out of memory. */
int sq_life_key(const char *const parts[], char *const env[], const char *hooks,
		char out[33]);

#endif
