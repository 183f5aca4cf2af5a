/* client.c: see client.h. */
#include <stddef.h>

#include "args.h"
#include "client.h"
#include "options.h"
#include "report.h"

int sq_client_post_opt(void)
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
	return 0;
}
