/* fuzz_imageref: --container-image references (sq_imgref_parse); a parsed reference's
 * canonical form parses back to itself. */
#include "fuzz.h"
#include "imageref.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *in = fz_dup(data, size), err[512];
	struct sq_image_ref ref, again;
	int rc;

	rc = sq_imgref_parse(in, &ref, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	if (rc == 0 && ref.kind != SQ_IMAGE_FILE) {
		char *canon = strdup(ref.canonical);

		if (sq_imgref_parse(canon, &again, err, sizeof(err)) != 0 ||
		    strcmp(again.canonical, canon) != 0)
			abort();
		sq_imgref_free(&again);
		free(canon);
	}
	sq_imgref_free(&ref);
	rc = sq_imgref_parse(in, &ref, err, 20);
	fz_check_err(rc, err, 20);
	sq_imgref_free(&ref);
	free(in);
	return 0;
}
