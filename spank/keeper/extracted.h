/*
 * extracted.h: the node-local cache of extracted images, on disk (core/nodecache.h says
 * what and why). Everything here runs as the job user, in the user's own cache directory
 * CACHE/UID (made by root, mode 0700): the tree is extracted by the user's `unsquashfs`
 * and mounted by the user, in a user namespace of the runtime's own; root never reads the
 * image or the tree.
 *
 *   CACHE/UID/KEY/rootfs        a complete tree (its presence is what "complete" means)
 *   CACHE/UID/KEY.size          its size in bytes (for eviction)
 *   CACHE/UID/KEY.lock          held shared while a container uses the tree, exclusive
 *                               while it is extracted or evicted; its mtime is the last use
 *   CACHE/UID/KEY.part/rootfs   an extraction in progress, or cut short by its job's end:
 *                               the next extraction resumes it; counted and evicted (least
 *                               recently used first) like a complete tree
 *   CACHE/UID/KEY.part/started  when its first run began (files written later are redone)
 *   CACHE/UID/KEY.part/image.sqsh  the node-local copy of the image it reads, when the
 *                               step's first node broadcast one (shared_copy.h)
 *   CACHE/UID/KEY.sqsh          that copy while KEY.part is prepared (under KEY.lock)
 *   CACHE/UID/KEY.tmp-PID/      an older squall's extraction: removed once dead
 */
#ifndef SQUALL_PLUGIN_EXTRACTED_H
#define SQUALL_PLUGIN_EXTRACTED_H

#include <stddef.h>

#define SQ_CACHE_MAX_AGE_S (14LL * 24 * 3600)   /* unused this long: evicted */

/* Take CACHE_DIR/KEY for use: its lock held shared (and its mtime, the last use, set to
 * now). The returned descriptor holds it; -1 when it is gone or being removed. */
int sq_extracted_hold(const char *cache_dir, const char *key);

/* Extract image into CACHE_DIR/KEY with unsquashfs (absolute path), unless it is there or
 * another process is extracting it; evict (max_bytes, SQ_CACHE_MAX_AGE_S) before, and again
 * once the new tree counts. Extracts into KEY.part, resuming what an earlier run cut short
 * left there (core/nodecache.h: the files already complete are kept, the rest extracted
 * over them); publishes by rename only a complete tree, synced, and drops it from the page
 * cache. unsquashfs runs at SCHED_IDLE, nice 19, ioprio idle, in a duty cycle that yields
 * to the other work on the node (sq_yield_next), and dies with the caller. 0 done or
 * skipped, -1 failed (nothing published, nothing left: a failed run is not resumed).
 * copy: a node-local copy of the image (shared_copy.h) or NULL: the extraction reads it
 * (or the one an earlier run left in KEY.part/image.sqsh) instead of image, moves it into
 * KEY.part and removes it once the tree is published; it is consumed either way. */
int sq_extracted_build(const char *cache_dir, const char *key, const char *image,
		       const char *copy, const char *unsquashfs, unsigned long long max_bytes);

/* Remove entries (complete trees and partial KEY.part ones whose lock is free) as
 * core/nodecache.h plans, dead extractions and half-removed trees. An
 * extraction KEY.tmp-PID is dead when PID is gone or a zombie (/proc/PID/stat; kill(pid, 0)
 * succeeds on a zombie) or nobody holds KEY.lock (the PID was reused); live ones count
 * toward max_bytes while they exist and are never removed. The directory is opened
 * O_NOFOLLOW and checked (core/safeopen.h), entries are reached relative to it, KEY.size
 * and KEY.lock only when they are regular files. */
void sq_extracted_evict(const char *cache_dir, unsigned long long max_bytes);

/* In the runtime's process before it execs the runtime: a new user namespace (the
 * caller's uid and gid mapped to themselves) and mount namespace, a tmpfs on data_dir
 * and there an overlay named `name` whose lower layer is CACHE_DIR/KEY/rootfs: the
 * runtime then starts NAME with ENROOT_DATA_PATH=data_dir and writes only to the tmpfs.
 * 0 ok; -1 with a message on stderr. */
int sq_extracted_mount(const char *cache_dir, const char *key, const char *data_dir,
		       const char *name);

#endif
