/* fuzz_mountinfo: /proc/PID/mountinfo text (sq_mountinfo_fresh_tmpfs).
 * Fields: CONTAINER-MOUNTINFO \0 HOST-MOUNTINFO. */
#include "fuzz.h"
#include "mountinfo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_fields ff;
	char out[256], small[8];

	fz_split(data, size, 2, &ff);
	if (sq_mountinfo_fresh_tmpfs(ff.f[0], ff.n > 1 ? ff.f[1] : NULL, out, sizeof(out)) == 0 &&
	    memchr(out, '\0', sizeof(out)) == NULL)
		abort();
	(void)sq_mountinfo_fresh_tmpfs(ff.f[0], ff.f[1], small, sizeof(small));
	fz_free(&ff);
	return 0;
}
