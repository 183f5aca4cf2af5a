/* fuzz_sqshpolicy: the compiled site policy for local files (sq_sqshpolicy_*), which
 * `sqshbuild policy compile` writes as root and the plugin reads at each step's start.
 * Fields: the compiled text, the file's real path, the policy file's stamp. */
#include "fuzz.h"
#include "sqshpolicy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sq_sqshpolicy_verdict v;
	struct fz_fields ff;
	char out[256];
	int rc;

	fz_split(data, size, 3, &ff);
	(void)sq_sqshpolicy_fresh(ff.f[0], ff.f[2]);
	rc = sq_sqshpolicy_decide(ff.f[0], ff.f[1], &v);
	if (rc == 0) {
		if (v.verdict < SQ_SQSHPOL_ACCEPT || v.verdict > SQ_SQSHPOL_SIGNED ||
		    v.where < SQ_SQSHPOL_UNJUDGED || v.where > SQ_SQSHPOL_DEFAULT ||
		    memchr(v.scope, '\0', sizeof(v.scope)) == NULL ||
		    (v.where != SQ_SQSHPOL_SCOPE && v.scope[0] != '\0') ||
		    (v.where == SQ_SQSHPOL_UNJUDGED && v.verdict != SQ_SQSHPOL_ACCEPT))
			abort();
		if (sq_sqshpolicy_refusal("/etc/containers/policy.json", ff.f[1], &v, out,
					  sizeof(out)) == 0 &&
		    (memchr(out, '\0', sizeof(out)) == NULL ||
		     (strchr(ff.f[1], '\n') == NULL && strchr(out, '\n') != NULL)))
			abort();
	} else if (rc != -1) {
		abort();
	}
	fz_free(&ff);
	return 0;
}
