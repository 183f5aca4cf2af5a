/* prestart_env.c: see prestart_env.h. */
#define _GNU_SOURCE
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>

#include "env.h"
#include "hooktext.h"
#include "lifecycle.h"
#include "prestart_env.h"
#include "stepconf.h"

char **sq_prestart_env(uid_t uid, uint32_t jobid, const char *nodes, const char *cluster)
{
	struct passwd pw, *res = NULL;
	char buf[4096], id[16], uidtext[16];
	char **env = calloc(1, sizeof(*env));

	if (env == NULL || getpwuid_r(uid, &pw, buf, sizeof(buf), &res) != 0 || res == NULL)
		goto fail;
	snprintf(id, sizeof(id), "%u", (unsigned)jobid);
	snprintf(uidtext, sizeof(uidtext), "%u", (unsigned)uid);
	if (sq_env_put(&env, "HOME", pw.pw_dir) < 0 || sq_env_put(&env, "USER", pw.pw_name) < 0 ||
	    sq_env_put(&env, "LOGNAME", pw.pw_name) < 0 || sq_env_put(&env, "SLURM_JOB_ID", id) < 0 ||
	    sq_env_put(&env, "SLURM_JOB_UID", uidtext) < 0 ||
	    (nodes != NULL && sq_env_put(&env, "SLURM_JOB_NUM_NODES", nodes) < 0) ||
	    (cluster != NULL && sq_env_put(&env, "SLURM_CLUSTER_NAME", cluster) < 0))
		goto fail;
	return env;
fail:
	sq_env_free(env);
	return NULL;
}

int sq_prestart_env_differs(char *const prolog_rt[], char *const step_rt[], char *name,
			    size_t namelen)
{
	char *hooks = sq_hooks_text(step_rt);
	int r = sq_life_env_differs(prolog_rt, step_rt, hooks, name, namelen);

	free(hooks);
	return r;
}
