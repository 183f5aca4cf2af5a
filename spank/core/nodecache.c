/* nodecache.c: see nodecache.h. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lifecycle.h"
#include "nodecache.h"

int sq_cache_key(const char *identity, const unsigned char *superblock, size_t len,
		 char out[33])
{
	char hex[2 * 96 + 1];
	const char *parts[] = { "squall-cache-1", identity ? identity : "", hex, NULL };
	char *const env[] = { NULL };

	if (len > 96)
		len = 96;
	for (size_t i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", superblock[i]);
	hex[2 * len] = '\0';
	return sq_life_key(parts, env, "", out);
}

int sq_cache_evict_plan(const struct sq_cache_entry *entries, size_t n,
			unsigned long long max_bytes, long long max_age_s, long long now,
			int *mark)
{
	unsigned long long total = 0;
	int marked = 0;

	for (size_t i = 0; i < n; i++) {
		/* last_use is a file's mtime, which its owner can set to anything: compute
		 * the age without overflow (a time in the future is age 0) */
		long long age;

		if (__builtin_sub_overflow(now, entries[i].last_use, &age))
			age = entries[i].last_use > now ? 0 : LLONG_MAX;
		mark[i] = !entries[i].in_use && age > max_age_s;
		marked += mark[i];
		if (!mark[i])
			total += entries[i].bytes;
	}
	while (total > max_bytes) {
		size_t oldest = n;
		for (size_t i = 0; i < n; i++)
			if (!mark[i] && !entries[i].in_use &&
			    (oldest == n || entries[i].last_use < entries[oldest].last_use))
				oldest = i;
		if (oldest == n)
			break;     /* what is left is in use */
		mark[oldest] = 1;
		marked++;
		total -= entries[oldest].bytes;
	}
	return marked;
}
