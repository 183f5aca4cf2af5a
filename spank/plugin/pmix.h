/* pmix.h: MPI through PMIx in the step's container (`srun --mpi=pmix`).
 *
 * A PMIx client reaches Slurm's PMIx server through two directories slurmstepd makes for
 * each step before the plugin's user_init: the server's, SlurmdSpoolDir/pmix.JOB.STEP
 * (PMIX_SERVER_TMPDIR), and the application's, TmpFS/spmix_appdir_UID_JOB.STEP (where the
 * server's shared-memory store lives), both found inside the container at the paths the
 * server hands out. Enroot's 50-slurm-pmi hook binds them when the runtime starts with
 * PMIX_* in its environment, but Slurm puts PMIX_* in the tasks' environment only, after
 * the container started; and a kept container serves later steps, each with directories
 * of its own. So, for a step whose SLURM_MPI_TYPE is pmix*:
 *   - the step's two directories are bound into the step's mount namespace (the kept
 *     container's fresh layer, or its own container), each alone at its own path, their
 *     parents made in the container's layer as Enroot's x-create=dir does (a TmpFS or
 *     SlurmdSpoolDir the image lacks), by a child that regains root for it;
 *   - each task gets PMIX_MCA_ptl/psec/gds from PMIX_PTL_MODULE/SECURITY_MODE/GDS_MODULE,
 *     as the hook gives them.
 * The user sees in the container only what the same uid sees on the node. */
#ifndef SQUALL_PMIX_H
#define SQUALL_PMIX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* 1 when the step runs Slurm's mpi/pmix (SLURM_MPI_TYPE pmix, pmix_v5, ...). */
int sq_pmix_step(char *const job_env[]);

/* Bind the step's application and server directories (those that exist, owned by uid)
 * into the mount namespace ns_mnt. 0 ok (or there is none); -1 with err when the
 * application's failed (a client that uses PMIx's shared-memory store fails in MPI_Init:
 * a warning); -2 with err when only the server's failed (MPI_Init does not need it: for
 * slurmd's log). */
int sq_pmix_bind_dirs(int ns_mnt, char *const job_env[], uid_t uid, gid_t gid,
		      uint32_t jobid, uint32_t stepid, char *err, size_t errlen);

/* Enroot's hook's PMIX_MCA_* for a task: each (KEY, VALUE) pair is passed to set. */
void sq_pmix_task_env(char *const task_env[], void (*set)(void *ctx, const char *key,
							  const char *value),
		      void *ctx);

#endif
