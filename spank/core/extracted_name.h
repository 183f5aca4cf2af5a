/*
 * extracted_name.h: what the plugin and the keeper both read of the node-local cache of
 * extracted images (keeper/extracted.h lays it out): an image's key, whether its tree is
 * complete, and the unsquashfs that extracts it. The keeper alone writes the cache.
 */
#ifndef SQUALL_EXTRACTED_NAME_H
#define SQUALL_EXTRACTED_NAME_H

/* The cache key of the image at path (identity: sq_image's): core sq_cache_key over the
 * identity and the file's superblock, read as the caller. 0 ok, -1 unreadable. */
int sq_extracted_key(const char *path, const char *identity, char key[33]);

/* The unsquashfs to extract with (a fixed list of system directories, never PATH), or
 * NULL when there is none. */
const char *sq_extracted_tool(void);

/* Slurm's sbcast, which sends a step's image to its nodes (keeper/shared_copy.h), from a
 * fixed list (/usr/bin, /usr/local/bin, /opt/slurm/bin: ParallelCluster's), or NULL. */
const char *sq_extracted_sbcast(void);

/* Seconds without a write after which a copy of a step's image (keeper/shared_copy.h:
 * copy-JOB.STEP.*) that no keeper waits for is removed: slurmd writes a broadcast's blocks
 * one after the other, and every keeper that sends or receives one holds
 * copy-JOB.STEP.lock from before the broadcast until its extraction took the copy. */
#define SQ_COPY_QUIET_S 60

/* 1 when the entry name of the cache directory dfd is a copy-JOB.STEP.* (its .lock
 * included) that nothing will use: not a directory, not written for SQ_COPY_QUIET_S
 * seconds at now, and its step's copy-JOB.STEP.lock missing, not a regular file, or held
 * by nobody (a job that ended on this node has no keeper left to hold it; its epilog
 * removed its copies, and late blocks of its broadcast, written after that, go by this
 * rule). Never follows a link, never blocks. 0 otherwise. */
int sq_copy_unused(int dfd, const char *name, long long now);

/* As root, in the job epilog: remove the job's copies of its images that no extraction
 * took (keeper/shared_copy.h: LOCAL_CACHE/UID/copy-JOBID.STEP.*; a node in a step whose
 * kept container it did not start receives one too), and the user's copies of other jobs
 * that nothing will use (sq_copy_unused: those of jobs that ended, written after their
 * epilog by slurmd's late blocks). The directories are opened and checked as the plugin
 * makes them (root's, then the user's); entries are unlinked relative to the user's, never
 * followed, directories left. The number removed, -1 when the directory is missing or
 * refused. */
int sq_extracted_drop_copies(const char *local_cache, long uid, unsigned int jobid);

/* As root, in the job epilog: sq_copy_unused's copies removed in every user's directory
 * of the cache (those a uid names, each checked as above; others refused are left), so
 * that an ended job's late copy goes with the node's next job whoever runs it. The number
 * removed, -1 when the cache is missing or refused. */
int sq_extracted_sweep_copies(const char *local_cache);

/* 1 when CACHE_DIR/KEY is complete. */
int sq_extracted_ready(const char *cache_dir, const char *key);

#endif
