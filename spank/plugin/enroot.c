/* enroot.c: see enroot.h. */
#define _GNU_SOURCE
#include <sys/wait.h>

#include "enroot.h"

int sq_enroot_call(const struct sq_runtime *rt, const char *what, const char *const *args,
		   char **out, char *err, size_t errlen)
{
	const char *argv[16];
	struct sq_child child;
	int n = 0, status;

	argv[n++] = rt->enroot;
	for (int i = 0; args[i] != NULL && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	if (sq_run(rt->enroot, (char *const *)argv, rt->envp, rt->cred, &status, &child, err,
		   errlen) < 0)
		return -1;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char why[64];
		sq_status_text(status, why, sizeof(why));
		sq_child_failure(&child, what, why, err, errlen);
		sq_child_close(&child);
		return -1;
	}
	if (out != NULL)
		*out = sq_capture_read(child.out_fd);
	sq_child_close(&child);
	return 0;
}
