/* fuzz_mounts: --container-mounts specs (sq_mounts_parse) with and without a cwd, and the
 * source check. Fields: SPEC \0 CWD. Every fstab line has four non-empty fields. */
#include "fuzz.h"
#include "mounts.h"
#include "mounts_exist.h"

static void check_list(const struct sq_mount_list *ml)
{
	for (size_t i = 0; i < ml->count; i++) {
		const char *l = ml->items[i].fstab;
		int spaces = 0;

		for (const char *p = l; *p; p++) {
			if (*p == '\n' || *p == '\t')
				abort();
			spaces += *p == ' ';
		}
		if (spaces != 3 || ml->items[i].target[0] != '/')
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_fields ff;
	struct sq_mount_list ml;
	char err[512];
	int rc;

	fz_split(data, size, 2, &ff);
	rc = sq_mounts_parse(ff.f[0], NULL, &ml, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	if (rc == 0)
		check_list(&ml);
	sq_mounts_free(&ml);
	rc = sq_mounts_parse(ff.f[0], ff.n > 1 ? ff.f[1] : "/home/user/run dir", &ml, err, 24);
	fz_check_err(rc, err, 24);
	if (rc == 0) {
		check_list(&ml);
		rc = sq_mounts_check_sources(&ml, err, sizeof(err));
		fz_check_err(rc, err, sizeof(err));
	}
	sq_mounts_free(&ml);
	fz_free(&ff);
	return 0;
}
