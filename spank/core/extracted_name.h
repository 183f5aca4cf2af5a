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

/* As root, in the job epilog: remove the job's copies of its images that no extraction
 * took (keeper/shared_copy.h: LOCAL_CACHE/UID/copy-JOBID.STEP.*; a node in a step whose
 * kept container it did not start receives one too). The directories are opened and
 * checked as the plugin makes them (root's, then the user's); entries are unlinked
 * relative to the user's, never followed, directories left. The number removed, -1 when
 * the directory is missing or refused. */
int sq_extracted_drop_copies(const char *local_cache, long uid, unsigned int jobid);

/* 1 when CACHE_DIR/KEY is complete. */
int sq_extracted_ready(const char *cache_dir, const char *key);

#endif
