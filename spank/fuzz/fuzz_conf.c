/* fuzz_conf: the Enroot container config file (sq_conf_render) with hostile environment
 * entries, fstab lines and hook arguments. Fields: FLAGS-BYTE then up to 15 strings,
 * divided among env, mounts and hook argv by the first byte. */
#include "conf.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fz_fields ff;
	struct sq_conf_spec spec;
	const char *env[FZ_MAX_FIELDS + 1], *mounts[FZ_MAX_FIELDS + 1], *argv[FZ_MAX_FIELDS + 2];
	char err[512], *out = NULL;
	int ne = 0, nm = 0, na = 0, rc;

	if (size < 1)
		return 0;
	fz_split(data + 1, size - 1, FZ_MAX_FIELDS - 1, &ff);
	argv[na++] = "/usr/libexec/squall/squall-efa-hook";
	for (int i = 0; i < ff.n; i++) {
		switch ((data[0] >> (i % 4)) % 3) {
		case 0: env[ne++] = ff.f[i]; break;
		case 1: mounts[nm++] = ff.f[i]; break;
		default: argv[na++] = ff.f[i]; break;
		}
	}
	env[ne] = NULL;
	mounts[nm] = NULL;
	argv[na] = NULL;
	spec.env = (data[0] & 0x40) ? NULL : env;
	spec.mounts = mounts;
	spec.hook_argv = (data[0] & 0x80) ? NULL : argv;
	spec.skip_entrypoint = data[0] & 1;
	rc = sq_conf_render(&spec, &out, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	free(out);
	out = NULL;
	rc = sq_conf_render(&spec, &out, err, 1);
	free(out);
	fz_free(&ff);
	return 0;
}
