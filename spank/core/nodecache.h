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

/* --- Yielding to the step (docs/plugin.md "Small files") ---
 * The extraction runs beside the job's steps. nice 19, SCHED_IDLE and ioprio idle do not
 * keep it from slowing them on a small node (hyperthread siblings, a virtio disk with no
 * I/O scheduler that honours the idle class, page cache), so the extractor is also run in
 * a duty cycle: SIGCONT for duty/1000 of each period, SIGSTOP for the rest. The duty
 * follows what the node does besides the extraction, judged over the last period. */
#define SQ_YIELD_FULL 1000         /* the node is otherwise idle: full speed */
#define SQ_YIELD_FLOOR 100         /* work beside it: a tenth of the time, so it progresses */
#define SQ_YIELD_PERIOD_MS 200     /* one period: one observation, one decision */
/* An extraction starts as the step that started its container does: its first period
 * yields as if work ran beside it, and doubles from there while nothing else runs
 * (issue 30: a cold step's first CPU-bound work ran 1.1-1.2x slower beside a full-speed
 * first period). */
#define SQ_YIELD_START SQ_YIELD_FLOOR
#define SQ_YIELD_CPU_PERMILLE 250  /* others busy above a quarter of one CPU: work beside it */
#define SQ_YIELD_IO_PERMILLE 200   /* others stalled on I/O a fifth of the time: likewise */

struct sq_yield_obs {
	unsigned long long window_us;   /* wall time of the period */
	unsigned long long busy_us;     /* all CPUs' busy time in it (/proc/stat: user, nice,
					 * system, irq, softirq, steal; not idle, not iowait) */
	unsigned long long own_us;      /* the extractor's processes' CPU time in it
					 * (/proc/PID/stat utime + stime) */
	long long io_stall_us;          /* growth of /proc/pressure/io "some total"; -1 unknown */
};

/* The next period's duty (SQ_YIELD_FLOOR..SQ_YIELD_FULL) after one at `duty` observed as
 * o: the floor as soon as others use more than SQ_YIELD_CPU_PERMILLE of one CPU, or stall
 * on I/O more than SQ_YIELD_IO_PERMILLE of the period beyond what the extractor itself can
 * account for (its running share); otherwise doubled, up to full speed. Pure. */
int sq_yield_next(int duty, const struct sq_yield_obs *o);

/* --- Resuming an extraction cut short (a job ended) ---
 * An extraction keeps CACHE/UID/KEY.part/rootfs when its job ends; the next one takes the
 * image's listing (`unsquashfs -llnumeric -UTC`, made once, kept in KEY.part), keeps the
 * files already complete and extracts the rest over the tree (`-f`, those files
 * excluded). */

/* One line of `unsquashfs -llnumeric -UTC`:
 *   MODE UID/GID SIZE YYYY-MM-DD HH:MM squashfs-root[/NAME][ -> TARGET]
 * (a device has "MAJOR, MINOR" for SIZE). Offsets are into the line. */
struct sq_list_entry {
	char type;                  /* '-' 'd' 'l' 'c' 'b' 'p' 's' */
	unsigned mode;              /* permission bits, with set-id and sticky */
	unsigned long long size;    /* 0 for devices */
	long long mtime;            /* seconds since the epoch, UTC, to the minute */
	long uid, gid;
	size_t name_off, name_len;  /* below the root: "" is the root */
	size_t target_off, target_len;   /* a symlink's target, else 0, 0 */
};

/* Parse one listing line (len bytes, no newline). 0 ok; -1 when it is not such a line or
 * its name cannot be told apart (a symlink whose name or target holds " -> "): the caller
 * then cannot trust the listing and extracts from scratch. Pure. */
int sq_cache_list_parse(const char *line, size_t len, struct sq_list_entry *e);

/* 1 when NAME can be written as a line of unsquashfs's -exclude-file with -no-wildcards
 * and mean exactly that path: no control character, no backslash, no leading '#', no
 * leading or trailing blank. A file whose name cannot is extracted again instead of being
 * kept. Pure. */
int sq_cache_name_listable(const char *name, size_t len);

/* 1 when the file on disk (from lstat: mode with its type bits, size, mtime) is the
 * listed regular file e, complete: same type, permissions and size, its mtime the listed
 * one (to the minute) and before first_start, when the first run of this extraction began
 * (a file being written, or written but not yet given its times, has a later mtime). Pure. */
int sq_cache_file_complete(const struct sq_list_entry *e, unsigned disk_mode,
			   unsigned long long disk_size, long long disk_mtime, long long first_start);

/* --- Which jobs start an extraction (plugstack local_cache_max_nodes) --- */
#define SQ_CACHE_MAX_NODES_DEFAULT 16

/* 1 when a job on job_num_nodes nodes (SLURM_JOB_NUM_NODES of the step, NULL or not a
 * number: one node) may start extractions on its nodes: at most max_nodes nodes (0: any
 * number). Jobs on more nodes still use the trees already there. Pure. */
int sq_cache_may_fill(const char *job_num_nodes, int max_nodes);

/* The number of hosts in a Slurm host list ("node[1-3,7],login", "r[1-2]n[01-04]"), for
 * the job prolog, which gets SLURM_NODELIST and no node count. -1 when it is not one
 * (a bad range, unbalanced brackets, more than 1,000,000 hosts). Pure. */
long sq_hostlist_count(const char *list);

#endif
