/*
 * client.h: the plugin in srun, sbatch and salloc (init_post_opt): everything the user can
 * get wrong in the flags is said on the terminal, before anything is allocated.
 */
#ifndef SQUALL_PLUGIN_CLIENT_H
#define SQUALL_PLUGIN_CLIENT_H

/* The environment sources of the flags, then the final check. 0 ok, -1 refused (said). */
int sq_client_post_opt(void);

#endif
