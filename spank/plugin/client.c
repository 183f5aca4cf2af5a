/* client.c: see client.h. */
#include <stddef.h>
#include <stdlib.h>

#include "args.h"
#include "client.h"
#include "options.h"
#include "prestart.h"
#include "report.h"

/* srun outside any job allocates one for its step: when that step's container is one it
 * keeps for the job (no name, no save, reuse not refused), the job's prolog may start it
 * (prestart.h). Only the job control environment reaches the prolog; what it says there
 * is only a hint: the prolog reads the image from the job's own flags. */
static void tell_the_prolog(spank_t sp, const struct sq_opts *o)
{
	if (spank_context() != S_CTX_LOCAL || !sq_opts_kept_for_job(o) ||
	    getenv("SLURM_JOB_ID") != NULL || getenv("SLURM_JOBID") != NULL)
		return;
	spank_job_control_setenv(sp, SQ_SRUN_JOB_VAR, "1", 1);
}

int sq_client_post_opt(spank_t sp)
{
	extern char **environ;
	char err[SQ_ERR_LEN], warn[512];
	int r;

	if (sq_args_error() != NULL)
		return -1;
	if (sq_args_load_env(environ, err, sizeof(err)) < 0) {
		sq_report_now("squall: error: ", "%s", err);
		return -1;
	}
	r = sq_opts_check(&sq_args, warn, sizeof(warn), err, sizeof(err));
	if (r < 0) {
		sq_report_now("squall: error: ", "%s", err);
		return -1;
	}
	if (r == 0 && warn[0])
		sq_report_now("squall: warning: ", "%s", warn);
	tell_the_prolog(sp, &sq_args);
	return 0;
}
