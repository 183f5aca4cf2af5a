/* fuzz_env: the environment rules (env.h) over a task environment and an environ block
 * (the image's /etc/environment and Enroot's environ). Fields: KEEP \0 BLOCK \0 ENV... */
#include "env.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_fields ff;
	char err[512], **out = NULL;
	int rc;

	fz_split(data, size, FZ_MAX_FIELDS, &ff);
	(void)sq_env_denied(ff.f[2]);
	(void)sq_env_task_specific(ff.f[2]);
	rc = sq_env_check_names(ff.f[0], err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	rc = sq_env_clean(ff.f + 2, &out, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	sq_env_free(out);
	out = NULL;
	rc = sq_env_overlay(ff.f[1], ff.len[1], ff.f[0], ff.f + 2, &out, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	sq_env_free(out);
	out = NULL;
	rc = sq_env_merge(ff.f + 2, ff.f[1], ff.len[1], ff.f[0], &out, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	sq_env_free(out);
	out = NULL;
	/* the raw input as one block, NULs included */
	rc = sq_env_merge(NULL, (const char *)data, size, NULL, &out, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	sq_env_free(out);
	out = NULL;
	rc = sq_env_task_unset(ff.f + 2, ff.f[0], &out, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	sq_env_free(out);
	out = NULL;
	rc = sq_env_keep_lines(ff.f + 2, ff.f[0], &out, err, 16);
	fz_check_err(rc, err, 16);
	sq_env_free(out);
	fz_free(&ff);
	return 0;
}
