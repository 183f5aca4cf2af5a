/*
 * client.h: the plugin in srun, sbatch and salloc (init_post_opt): everything the user can
 * get wrong in the flags is said on the terminal, before anything is allocated.
 */
#ifndef SQUALL_PLUGIN_CLIENT_H
#define SQUALL_PLUGIN_CLIENT_H

#include <slurm/spank.h>

/* The environment sources of the flags, then the final check. 0 ok, -1 refused (said).
 * In an srun that allocates its job, a container the step keeps for the job is told to the
 * job prolog (prestart.h, SQ_SRUN_JOB_VAR) so that it starts at allocation. */
int sq_client_post_opt(spank_t sp);

#endif
