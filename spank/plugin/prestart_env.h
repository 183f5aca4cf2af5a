/*
 * prestart_env.h: the job environment the job prolog's start of the job's container runs
 * with (prestart.h), built the same way by the prolog and by the steps that look for it.
 */
#ifndef SQUALL_PLUGIN_PRESTART_ENV_H
#define SQUALL_PLUGIN_PRESTART_ENV_H

#include <stdint.h>
#include <sys/types.h>

/* The prestart's job environment: HOME, USER and LOGNAME of uid's passwd entry,
 * SLURM_JOB_ID, and SLURM_JOB_NUM_NODES and SLURM_CLUSTER_NAME when given (NULL: left
 * out). A NULL-terminated heap array (sq_env_free), NULL when out of memory or uid has no
 * passwd entry. */
char **sq_prestart_env(uid_t uid, uint32_t jobid, const char *nodes, const char *cluster);

#endif
