/*
 * prestart_env.h: the job environment the job prolog's start of the job's container runs
 * with (prestart.h), built the same way by the prolog and by the steps that look for it.
 */
#ifndef SQUALL_PLUGIN_PRESTART_ENV_H
#define SQUALL_PLUGIN_PRESTART_ENV_H

#include <stdint.h>
#include <sys/types.h>

/* The prestart's job environment: HOME, USER and LOGNAME of uid's passwd entry,
 * SLURM_JOB_ID, SLURM_JOB_UID (Enroot's PMI hook names it), and SLURM_JOB_NUM_NODES and SLURM_CLUSTER_NAME when given (NULL: left
 * out). A NULL-terminated heap array (sq_env_free), NULL when out of memory or uid has no
 * passwd entry. */
char **sq_prestart_env(uid_t uid, uint32_t jobid, const char *nodes, const char *cluster);

/* Does the container the prolog started with runtime environment prolog_rt serve a step
 * whose own runtime environment is step_rt? 0 yes; 1 no, the first variable the start
 * reads that differs (lifecycle.h: sq_life_env_differs, with the hooks the runtime runs)
 * named in name[namelen]: the step starts its own (a job's ENROOT_ROOTFS_WRITABLE or
 * SQUALL_STEPS=off is never silently dropped). */
int sq_prestart_env_differs(char *const prolog_rt[], char *const step_rt[], char *name,
			    size_t namelen);

#endif
