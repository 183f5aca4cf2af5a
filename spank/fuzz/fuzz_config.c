/* fuzz_config: plugstack.conf arguments (sq_config_parse). Each NUL-separated field is
 * one argument. */
#include "config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_fields ff;
	struct sq_config c;
	char err[512];
	int rc;

	fz_split(data, size, FZ_MAX_FIELDS, &ff);
	rc = sq_config_parse(&c, ff.n, ff.f, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	if (rc == 0)
		sq_config_free(&c);
	rc = sq_config_parse(&c, ff.n, ff.f, err, 12);
	fz_check_err(rc, err, 12);
	if (rc == 0)
		sq_config_free(&c);
	fz_free(&ff);
	return 0;
}
