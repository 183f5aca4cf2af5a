/* args.c: see args.h. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "report.h"

struct sq_opts sq_args;
static int args_ready;
static char args_err[SQ_ERR_LEN];

static void ensure_init(void)
{
	if (!args_ready) {
		sq_opts_init(&sq_args);
		args_ready = 1;
	}
}

/* SPANK calls this for each flag given (twice in slurmstepd: same value is fine). */
static int on_option(int val, const char *optarg, int remote)
{
	char err[SQ_ERR_LEN];

	ensure_init();
	/* slurmstepd passes "" for flags without an argument (from the
	 * SLURM_SPANK__SLURM_SPANK_OPTION_* variables): the flag was given, nothing more. */
	for (size_t i = 0; i < sq_opt_flag_count(); i++) {
		const struct sq_flag *f = sq_opt_flag(i);
		if (f->id == val && !f->has_arg)
			optarg = NULL;
	}
	if (sq_opt_set(&sq_args, val, optarg, SQ_SRC_CLI, err, sizeof(err)) == 0)
		return 0;
	if (args_err[0] == '\0')
		snprintf(args_err, sizeof(args_err), "%s", err);
	/* In srun/sbatch stderr is the user's terminal. */
	if (!remote)
		sq_report_now("squall: error: ", "%s", err);
	else
		slurm_error("squall: %s", err);
	return -1;
}

int sq_args_register(spank_t sp)
{
	/* Static: some Slurm releases keep the pointer rather than a copy. */
	static struct spank_option table[64];
	size_t count = sq_opt_flag_count();

	ensure_init();
	if (count > sizeof(table) / sizeof(table[0])) {
		slurm_error("squall: the flag table is larger than the plugin expects");
		return -1;
	}
	for (size_t i = 0; i < count; i++) {
		const struct sq_flag *f = sq_opt_flag(i);
		struct spank_option *opt = &table[i];

		opt->name = (char *)f->name;
		opt->arginfo = (char *)f->arg_info;
		opt->usage = (char *)f->help;
		opt->has_arg = f->has_arg;
		opt->val = f->id;
		opt->cb = on_option;
		if (spank_option_register(sp, opt) != ESPANK_SUCCESS) {
			slurm_error("squall: cannot register --%s", f->name);
			return -1;
		}
	}
	return 0;
}

int sq_args_load_env(char *const envp[], char *err, size_t errlen)
{
	ensure_init();
	if (envp == NULL)
		return 0;
	return sq_opts_load_environ(&sq_args, envp, err, errlen);
}

const char *sq_args_error(void)
{
	return args_err[0] ? args_err : NULL;
}
