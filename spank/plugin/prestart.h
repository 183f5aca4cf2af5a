/*
 * prestart.h: --container-prestart=IMAGE, the job's container started at allocation.
 *
 * A job that says at submission which image its steps run (`sbatch --container-prestart=
 * IMAGE`, mksbatch's `prestart: true`) gets its kept container (kept.h) started by the job
 * prolog on every node, in the background, while the batch script gets going: the job's
 * first `srun --container-image=IMAGE` then joins it instead of starting the runtime.
 *
 *   sq_prestart_prolog  slurmd's job prolog, as root: nothing unless the job asked for it;
 *                       else a child, in a session of its own with the user's ids (as
 *                       slurmstepd's user_init has them), resolves the image, takes the
 *                       kept container's lock, tells the prolog, and starts the container
 *                       (step.c sq_step_prestart). The prolog waits only for the lock
 *                       (PRESTART_WAIT_S at most) and never fails: a job whose prestart
 *                       failed starts its container in its first step, as without it.
 *   sq_prestart_env     the job environment the prolog's start runs with
 *                       (prestart_env.h). A step builds the same one to find the container
 *                       by its key (sq_kept_key): a step whose options, image or conf
 *                       differ finds none and starts its own.
 *
 * A job srun allocates itself (`srun --container-image=IMAGE` outside any job) names its
 * image at submission too: srun (client.c) says so in the job control environment
 * (SQ_SRUN_JOB_VAR), and where plugstack prestart_srun_jobs=1 the prolog starts the step's
 * container as for the flag, unless the step would not keep it for the job, or the job is
 * one whose steps send the image to their nodes (2 to local_cache_max_nodes nodes, the
 * node-local cache on: a prolog has no step to send with). A step finds what the prolog
 * started by its marker (prestart_mark.h), written before the prolog returns.
 *
 * The container is the job's like any kept one: recorded for the job epilog, which ends
 * it (and the marker); it ends by itself after SQ_KEPT_IDLE_S without a step.
 */
#ifndef SQUALL_PLUGIN_PRESTART_H
#define SQUALL_PLUGIN_PRESTART_H

#include <stdint.h>
#include <sys/types.h>
#include <slurm/spank.h>

#include "config.h"

/* The id the prolog's start uses where a step id goes (names, the conf file): none of
 * Slurm's (slurm.h: 0xfffffffa..0xfffffffe are taken). */
#define SQ_STEP_PRESTART 0xfffffff0U
/* srun's word to the prolog (the job control environment: the prolog sees SPANK_ first). */
#define SQ_SRUN_JOB_VAR "SQUALL_SRUN_JOB"
/* How long the prolog waits for its child to hold the container's lock. */
#define SQ_PRESTART_WAIT_S 10

/* The job prolog's part (S_CTX_JOB_SCRIPT, as root). Always 0: a prolog that fails
 * drains the node, and the job can start its container in its first step. */
int sq_prestart_prolog(const struct sq_config *cfg, spank_t sp);

#endif
