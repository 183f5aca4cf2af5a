/*
 * enroot.h: the runtime as the job user sees it, and the one way to run an enroot
 * command to completion (`enroot start` is spawned by container.c instead: it stops).
 */
#ifndef SQUALL_PLUGIN_ENROOT_H
#define SQUALL_PLUGIN_ENROOT_H

#include <stddef.h>

#include "runcmd.h"

struct sq_runtime {
	const char *enroot;
	char *const *envp;
	const struct sq_cred *cred;
};

/* Run `enroot ARGS...` (args NULL-terminated, at most 14) as the user, to completion;
 * 0 when it exited 0, else -1 with err holding "<what> failed (<status>): <last lines>".
 * *out (heap) gets its stdout when out != NULL. */
int sq_enroot_call(const struct sq_runtime *rt, const char *what, const char *const *args,
		   char **out, char *err, size_t errlen);

#endif
