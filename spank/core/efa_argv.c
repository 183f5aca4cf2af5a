/*
 * efa_argv.c: the squall-efa-hook command line, as an argv (never a shell string).
 */
#include <stdlib.h>
#include <string.h>

#include "efa.h"
#include "options.h"

static int push(char **argv, int *n, const char *s)
{
	argv[*n] = strdup(s);
	if (!argv[*n])
		return -1;
	(*n)++;
	return 0;
}

static int push_opt(char **argv, int *n, const char *flag, const char *value)
{
	if (!value || !*value)
		return 0;
	return push(argv, n, flag) || push(argv, n, value) ? -1 : 0;
}

char **sq_efa_hook_argv(const char *hook_path, const struct sq_efa_roots *roots,
			const struct sq_efa_request *req)
{
	char **argv = calloc(16, sizeof(*argv));
	const char *mode = req->mode == SQ_EFA_SETTING_REQUIRE ? "require" :
			   req->mode == SQ_EFA_SETTING_OFF ? "off" : "auto";
	int n = 0;

	if (!argv)
		return NULL;
	if (push(argv, &n, hook_path) || push_opt(argv, &n, "--mode", mode) ||
	    (roots && (push_opt(argv, &n, "--sysfs-root", roots->sysfs) ||
		       push_opt(argv, &n, "--dev-root", roots->dev) ||
		       push_opt(argv, &n, "--opt-root", roots->opt))) ||
	    push_opt(argv, &n, "--user-set", req->user_set) ||
	    push_opt(argv, &n, "--nccl-debug", req->nccl_debug)) {
		sq_efa_argv_free(argv);
		return NULL;
	}
	return argv;
}

void sq_efa_argv_free(char **argv)
{
	if (!argv)
		return;
	for (char **p = argv; *p; p++)
		free(*p);
	free(argv);
}
