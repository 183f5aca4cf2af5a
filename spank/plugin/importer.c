/* importer.c: see importer.h. */
#define _GNU_SOURCE
#include <stdint.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <slurm/spank.h>

#include "env.h"
#include "importer.h"
#include "stepconf.h"
#include "strbuf.h"
#include "strv.h"

int sq_importer_setup(struct sq_importer *im, const char *path, char *const runtime_env[],
		      const char *runtime_path, uid_t uid, uint32_t jobid, uint32_t stepid,
		      const struct sq_cred *cred, char *err, size_t errlen)
{
	char num[3][32];
	char **env = NULL;
	size_t n = 0;

	im->path = path;
	im->cred = cred;
	im->envp = NULL;
	for (size_t i = 0; runtime_env != NULL && runtime_env[i] != NULL; i++)
		if (sq_strv_push(&env, &n, runtime_env[i]) < 0)
			goto oom;
	snprintf(num[0], sizeof(num[0]), "%u", (unsigned)uid);
	snprintf(num[1], sizeof(num[1]), "%u", (unsigned)jobid);
	snprintf(num[2], sizeof(num[2]), "%u", (unsigned)stepid);
	if (sq_env_put(&env, "PYXIS_RUNTIME_PATH", runtime_path) < 0 ||
	    sq_env_put(&env, "PYXIS_VERSION", SQ_PYXIS_PROTOCOL_VERSION) < 0 ||
	    sq_env_put(&env, "SLURM_JOB_UID", num[0]) < 0 ||
	    sq_env_put(&env, "SLURM_JOB_ID", num[1]) < 0 ||
	    sq_env_put(&env, "SLURM_STEP_ID", num[2]) < 0)
		goto oom;
	im->envp = env;
	return 0;
oom:
	sq_env_free(env);
	sq_errf(err, errlen, "out of memory preparing the importer's environment");
	return -1;
}

void sq_importer_free(struct sq_importer *im)
{
	sq_env_free(im->envp);
	im->envp = NULL;
}

char *sq_enroot_uri(const char *image_text)
{
	char *uri = NULL;

	if (strstr(image_text, "://") != NULL)
		return strdup(image_text);
	return asprintf(&uri, "docker://%s", image_text) < 0 ? NULL : uri;
}

int sq_importer_get(const struct sq_importer *im, const char *image_text, char **path,
		    char *err, size_t errlen)
{
	char *uri = sq_enroot_uri(image_text);
	const char *argv[] = { im->path, "get", uri, NULL };
	char line[PATH_MAX + 64], tail[600];
	struct sq_child child = { -1, -1, -1 };
	int status, rv = -1;

	*path = NULL;
	if (uri == NULL)
		return sq_errf(err, errlen, "out of memory");
	if (sq_run(im->path, (char *const *)argv, im->envp, im->cred, &status, &child, err,
		   errlen) < 0)
		goto fail;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char why[64];
		sq_status_text(status, why, sizeof(why));
		sq_capture_tail(child.err_fd, 2, tail, sizeof(tail));
		sq_errf(err, errlen, "--container-image=%s: the site's importer %s failed (%s): %s",
			image_text, im->path, why, tail[0] ? tail : "it printed no error");
		goto fail;
	}
	sq_capture_tail(child.out_fd, 1, line, sizeof(line));
	if (line[0] != '/') {
		sq_errf(err, errlen, "--container-image=%s: the site's importer %s printed no "
			"absolute squashfs path (it printed '%.200s')", image_text, im->path, line);
		goto fail;
	}
	*path = strdup(line);
	rv = *path ? 0 : sq_errf(err, errlen, "out of memory");
fail:
	sq_child_close(&child);
	free(uri);
	return rv;
}

void sq_importer_release(const struct sq_importer *im)
{
	const char *argv[] = { im->path, "release", NULL };
	char err[SQ_ERR_LEN], tail[600];
	struct sq_child child;
	int status;

	if (im->path == NULL || im->envp == NULL)
		return;
	if (sq_run(im->path, (char *const *)argv, im->envp, im->cred, &status, &child, err,
		   sizeof(err)) < 0) {
		slurm_error("squall: importer %s release: %s", im->path, err);
		return;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		sq_capture_tail(child.err_fd, 2, tail, sizeof(tail));
		slurm_error("squall: importer %s release failed: %s", im->path, tail);
	}
	sq_child_close(&child);
}
