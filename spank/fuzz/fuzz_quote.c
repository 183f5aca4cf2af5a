/* fuzz_quote: shell quoting (sq_shell_quote), UTF-8 and text checks, booleans. */
#include "fuzz.h"
#include "quote.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *in = fz_dup(data, size), err[256], *q = NULL;
	size_t bad;
	int rc;

	rc = sq_shell_quote(in, size, &q, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	if (rc == 0 && (q == NULL || strchr(q, '\0') == NULL))
		abort();
	sq_str_free(q);
	(void)sq_utf8_check(in, size, &bad);
	(void)sq_is_identifier(in, size);
	rc = sq_text_check("--container-x", in, 100, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	(void)sq_bool_parse(in);
	free(in);
	return 0;
}
