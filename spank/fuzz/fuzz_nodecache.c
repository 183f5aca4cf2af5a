/* fuzz_nodecache: the node-local cache key (sq_cache_key) and the eviction plan
 * (sq_cache_evict_plan) from arbitrary entries and limits. Byte 0: entry count; bytes
 * 1-24: max_bytes, max_age_s, now; then 17 bytes per entry; the rest is identity \0
 * superblock. */
#include "fuzz.h"
#include "nodecache.h"

static uint64_t take64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sq_cache_entry entries[32];
	int mark[32];
	size_t n, off, i;
	unsigned long long total = 0, kept = 0, max_bytes;
	long long max_age, now;
	int marked, count = 0;
	char key[33];
	struct fz_fields ff;

	if (size < 25)
		return 0;
	n = data[0] % 32;
	max_bytes = take64(data + 1);
	max_age = (long long)take64(data + 9);
	now = (long long)take64(data + 17);
	off = 25;
	for (i = 0; i < n && off + 17 <= size; i++, off += 17) {
		entries[i].bytes = take64(data + off) >> 8;
		entries[i].last_use = (long long)take64(data + off + 8);
		entries[i].in_use = data[off + 16] & 1;
	}
	n = i;
	marked = sq_cache_evict_plan(entries, n, max_bytes, max_age, now, mark);
	for (i = 0; i < n; i++) {
		if (mark[i] != 0 && mark[i] != 1)
			abort();
		if (mark[i] && entries[i].in_use)
			abort();       /* an entry in use is never evicted */
		count += mark[i];
		total += entries[i].bytes;
		if (!mark[i])
			kept += entries[i].bytes;
	}
	if (count != marked)
		abort();
	(void)total;
	(void)kept;
	fz_split(data + off, size - off, 2, &ff);
	if (sq_cache_key(ff.f[0], (const unsigned char *)ff.f[1], ff.len[1], key) != 0 ||
	    strlen(key) != 32)
		abort();
	fz_free(&ff);
	return 0;
}
