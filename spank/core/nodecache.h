/*
 * nodecache.h: the node-local cache of extracted images (docs/plugin.md "Small files").
 *
 * Reading thousands of small files through squashfuse costs a FUSE round trip per open,
 * stat and read; the same tree extracted on the node's disk reads at disk speed. So the
 * first kept container of an image on a node starts from the squashfs file as usual, and
 * its keeper extracts the image in the background (the job user's `unsquashfs`, niced, into
 * CACHE/UID/KEY.tmp-PID, published by rename to CACHE/UID/KEY once complete and synced);
 * later kept containers of that user and image start from the extracted tree under an
 * overlay, so the tree itself is never written. A changed image file has another key, so a
 * stale tree is never served; an unfinished one never has the final name.
 * Entries are evicted least recently used first above the size limit, and when unused
 * for longer than the age limit; one in use (its lock held shared) is never removed.
 */
#ifndef SQUALL_CORE_NODECACHE_H
#define SQUALL_CORE_NODECACHE_H

#include <stddef.h>

/* The cache key of an image: 32 hex digits over its identity (device, inode, size, mtime,
 * as sq_image identity) and the first 96 bytes of the file (the squashfs superblock:
 * creation time, bytes used, inode count), so that a rewritten file never matches. */
int sq_cache_key(const char *identity, const unsigned char *superblock, size_t len,
		 char out[33]);

/* One complete entry, for the eviction plan. */
struct sq_cache_entry {
	unsigned long long bytes;   /* size of its tree */
	long long last_use;         /* seconds since the epoch (mtime of KEY.lock) */
	int in_use;                 /* its lock is held shared: never evict */
};

/* Which entries to remove: mark[i] = 1 for each entry unused for more than max_age_s
 * seconds at now, then, oldest first, until the total is at most max_bytes (entries in
 * use stay even when that leaves it above). Returns how many are marked. */
int sq_cache_evict_plan(const struct sq_cache_entry *entries, size_t n,
			unsigned long long max_bytes, long long max_age_s, long long now,
			int *mark);

#endif
