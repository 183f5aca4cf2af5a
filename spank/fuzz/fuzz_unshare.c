/* fuzz_unshare: --container-unshare values (sq_unshare_parse); a parsed mask's canonical
 * text parses back to the same mask. */
#include "fuzz.h"
#include "unshare.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *in = fz_dup(data, size), err[256], canon[64];
	int mask, again, rc;

	rc = sq_unshare_parse(in, &mask, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	if (rc == 0) {
		sq_unshare_str(mask, canon, sizeof(canon));
		if (sq_unshare_parse(canon, &again, err, sizeof(err)) != 0 || again != mask)
			abort();
	}
	free(in);
	return 0;
}
