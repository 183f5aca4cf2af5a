/*
 * args.h: the container flags as SPANK options. The flag list, the parsing and the
 * precedence rules are the core's (options.h); this file only registers each row of
 * the core's table with spank_option_register() and feeds the callbacks and the
 * SQUALL_CONTAINER_* / PYXIS_CONTAINER_* variables into one struct sq_opts.
 */
#ifndef SQUALL_PLUGIN_ARGS_H
#define SQUALL_PLUGIN_ARGS_H

#include <stdint.h>
#include <slurm/spank.h>

#include "options.h"

/* The step's settings (one per process: srun, sbatch, or a slurmstepd). */
extern struct sq_opts sq_args;

/* Register every flag. 0 ok, -1 error (logged). */
int sq_args_register(spank_t sp);
/* Apply environment-variable sources from envp; err on a bad value. */
int sq_args_load_env(char *const envp[], char *err, size_t errlen);
/* The first error an option callback hit (Slurm may only say "invalid option"). */
const char *sq_args_error(void);

#endif
