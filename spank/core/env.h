/*
 * env.h: environment rules.
 *
 * (a) The environment of every enroot/sqshbuild call is the job's environment minus a
 *     deny list, plus the ENROOT_* variables the plugin sets afterwards:
 *       - LD_* and GLIBC_TUNABLES: loader settings meant for the user's program, not for
 *         the runtime running on the user's behalf;
 *       - BASH_ENV, ENV, BASH_FUNC_*, SHELLOPTS, BASHOPTS, IFS, CDPATH, GLOBIGNORE, PS4:
 *         enroot is a bash script; these would change what it runs;
 *       - ENROOT_* settings that are the site's (as Pyxis denies them): the runtime's
 *         directories (ENROOT_RUNTIME_PATH, _DATA_PATH, _CACHE_PATH, _TEMP_PATH, ...) and
 *         the import settings (ENROOT_SQUASH_OPTIONS, ENROOT_ALLOW_HTTP, ...); the others
 *         (ENROOT_ROOTFS_WRITABLE, ENROOT_REMAP_ROOT, ...) reach the runtime, with what the
 *         flags say set over them by the plugin;
 *       - per-task variables (see sq_env_task_specific): one container serves all the
 *         node's tasks, so task 0's rank must not be baked into the container.
 *     Everything else is kept (PATH, HOME, USER, TERM, LANG, proxies, the step-wide
 *     SLURM_* and PMIX_* variables that Enroot's own hooks read).
 * (b) Each task's environment is its own, overlaid with the started container's
 *     (/proc/PID/environ: NUL-separated KEY=VALUE): container values win, except
 *       - names listed in --container-env, which keep the task's value when it has one;
 *       - SLURM_*, PMIX_*, PMI_* (the step's own), likewise; a SLURM_* the task lacks
 *         is dropped (a kept container's copy from an earlier step: -n 8 after -n 1);
 *       - per-task variables, which always keep the task's value;
 *       - ENROOT_* names, which Enroot itself drops.
 *     Entries without '=' or with a key that is not [A-Za-z_][A-Za-z0-9_]* are skipped.
 * (c) LANG, LC_ALL and LANGUAGE are removed from each task's own environment unless
 *     --container-env names them (as Pyxis: a host locale the image lacks breaks perl and
 *     python); the image's values, if any, still come with the container's environment.
 * (d) The --container-env names the job has go into the start's environ() as well, so the
 *     entrypoint and the runtime's hooks see the host's values (as Pyxis does).
 *
 * Arrays returned are NULL-terminated arrays of heap "KEY=VALUE" strings: free with
 * sq_env_free.
 */
#ifndef SQUALL_CORE_ENV_H
#define SQUALL_CORE_ENV_H

#include <stddef.h>

/* 1 when NAME is removed from the environment of runtime calls (rules (a)). */
int sq_env_denied(const char *name);

/* 1 for variables that differ between the tasks of one step: SLURM_PROCID,
 * SLURM_LOCALID, SLURM_TASK_PID, SLURM_GTIDS, SLURM_CPU_BIND*, PMI_RANK, PMI_FD,
 * PMIX_RANK, OMPI_COMM_WORLD_*RANK, CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES,
 * GPU_DEVICE_ORDINAL, ... */
int sq_env_task_specific(const char *name);

/* envp minus the deny list, in order. Entries without '=' are dropped. 0 ok, -1 error. */
int sq_env_clean(char *const envp[], char ***out, char *err, size_t errlen);

/* Validate --container-env: NAME[,NAME...], identifiers, no empty names.
 * 0 ok, -1 error naming --container-env and the bad name. */
int sq_env_check_names(const char *csv, char *err, size_t errlen);

/*
 * The entries of the container's environ block (block[0..len), NUL-separated, a
 * missing final NUL is fine) that must be set in a task whose environment is task_env,
 * after rules (b). keep: the --container-env list or NULL. For a plugin that changes a
 * task's environment one spank_setenv at a time. 0 ok, -1 error.
 */
int sq_env_overlay(const char *block, size_t len, const char *keep, char *const task_env[],
		   char ***out, char *err, size_t errlen);

/* task_env with sq_env_overlay applied: the complete environment of the task.
 * Existing names keep their position; new names are appended in block order. */
int sq_env_merge(char *const task_env[], const char *block, size_t len, const char *keep,
		 char ***out, char *err, size_t errlen);

/* Rule (c): the names to unset in a task before the overlay. 0 ok, -1 error. */
int sq_env_task_unset(char *const task_env[], const char *keep, char ***out, char *err,
		      size_t errlen);

/* Rule (d): "NAME=VALUE" from job_env for each name in keep (ENROOT_* names skipped: the
 * runtime drops them). 0 ok, -1 error. */
int sq_env_keep_lines(char *const job_env[], const char *keep, char ***out, char *err,
		      size_t errlen);

/* Remove each entry of block (a /proc/PID/environ block, NUL-separated) that is exactly
 * entry ("KEY=VALUE"), shortening *len: the container's environment less what the runtime
 * itself carried into it (the runtime's own PATH, which is not the image's). */
void sq_env_block_drop(char *block, size_t *len, const char *entry);

void sq_env_free(char **env);

/* The value of name in env (NULL-terminated "KEY=VALUE"; the last one wins), or NULL. */
const char *sq_env_value(char *const env[], const char *name);

#endif
