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

/* 1 when CACHE_DIR/KEY is complete. */
int sq_extracted_ready(const char *cache_dir, const char *key);

#endif
