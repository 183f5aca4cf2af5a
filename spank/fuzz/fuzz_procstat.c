/* fuzz_procstat: /proc/PID/stat lines (sq_procstat_parse, reap's sq_procstat_ids) and the
 * running-record files (sq_running_parse[_ns]); a parsed record formats back to itself. */
#include <stdio.h>

#include "fuzz.h"
#include "procstat.h"
#include "reap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* exact-size copy without a NUL: the parsers take (text, len) */
	char *in = malloc(size ? size : 1), state, buf[128];
	unsigned long long start, nsstart;
	long pid, nspid, ppid, pgrp, sid;

	if (in == NULL)
		abort();
	memcpy(in, data, size);
	(void)sq_procstat_parse(in, size, &state, &start);
	(void)sq_procstat_ids(in, size, &ppid, &pgrp, &sid);
	if (sq_running_parse(in, size, &pid, &start) == 0) {
		long p2;
		unsigned long long s2;

		if (sq_running_format(pid, start, buf, sizeof(buf)) == 0 &&
		    (sq_running_parse(buf, strlen(buf), &p2, &s2) != 0 || p2 != pid || s2 != start))
			abort();
	}
	if (sq_running_parse_ns(in, size, &pid, &start, &nspid, &nsstart) == 0)
		(void)sq_running_format_ns(pid, start, nspid, nsstart, buf, sizeof(buf));
	free(in);
	return 0;
}
