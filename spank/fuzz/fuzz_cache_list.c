/* fuzz_cache_list: one line of `unsquashfs -lln` (sq_cache_list_parse), the listing the
 * node-local cache resumes an extraction from: the image is the user's own, so any line
 * parses within its bounds or is refused. The input is the line, without a NUL. */
#include "fuzz.h"
#include "nodecache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sq_list_entry e;
	char *line = malloc(size ? size : 1);

	if (line == NULL)
		abort();
	memcpy(line, data, size);
	if (sq_cache_list_parse(line, size, &e) == 0) {
		if (e.name_off > size || e.name_len > size - e.name_off ||
		    e.target_off > size || e.target_len > size - e.target_off ||
		    strchr("-dlcbps", e.type) == NULL || e.type == '\0' || e.mode > 07777)
			abort();
		(void)sq_cache_name_listable(line + e.name_off, e.name_len);
		(void)sq_cache_file_complete(&e, 0100000 | e.mode, e.size, e.mtime, e.mtime + 60);
	}
	free(line);
	return 0;
}
