/*
 * shared_copy.h: the image read once from the shared file system for all the nodes of a
 * step that fill their node-local cache (issue 27: the extraction read the whole image from
 * /fsx on every node of a job, O(N) reads of it).
 *
 * The step's first node sends the image with Slurm's own broadcast, `sbcast -j JOBID` run
 * as the job's user (slurmctld gives the job's credential, slurmd's fanout tree carries
 * the blocks), into every node's cache directory (the same path on each node), the job's
 * nodes, not only the step's (shared_copy.c says why); what no extraction takes goes with
 * the job's epilog:
 *
 *   CACHE/UID/copy-JOB.STEP.in    the image as it arrived on this node
 *   CACHE/UID/copy-JOB.STEP.sum   sent after it: "SHA256 SIZE INO MTIME_S MTIME_NS": the
 *                                 digest of the copy the first node itself received, the
 *                                 image's inode, size and mtime there; or "none" when it
 *                                 sent nothing (its own tree was there, or the broadcast
 *                                 failed)
 *
 * Named by the step, not by the cache key: each node's key covers its own view of the file,
 * whose device number differs from client to client of a network file system.
 *
 * Every node that fills its cache in that step waits for the record (a bounded time:
 * sq_copy_receive's first_s below) and extracts from its copy when the image it sees has that
 * inode, size and mtime and the copy that size and digest; on "none", or a copy that does
 * not match, it reads the image itself, as before.
 * Everything is the user's, in the user's own 0700 directory: a copy is trusted as far as
 * the user's own partial tree is (a user can spoil only their own cache).
 */
#ifndef SQUALL_KEEPER_SHARED_COPY_H
#define SQUALL_KEEPER_SHARED_COPY_H

#include <stddef.h>

/* Held by each keeper that sends or receives a step's copy, from before the broadcast
 * until its extraction took the copy: CACHE/UID/copy-JOB.STEP.lock (flock). A copy whose
 * lock nobody holds and that slurmd has not written for SQ_COPY_QUIET_S seconds is removed
 * by the next eviction (extracted.c) or job epilog (extracted_name.h: sq_copy_unused), so
 * the late blocks of an ended job's broadcast, written after its epilog, do not stay. The
 * lock's fd (-1 when it cannot be had: the copy is then as unprotected as before). */
int sq_copy_hold(const char *cache_dir, const char *jobstep);
/* The copy taken (or given up): the lock removed and released. */
void sq_copy_release(const char *cache_dir, const char *jobstep, int fd);

/* On the step's first node. have_tree: this node's tree is there, nothing to send (the
 * record says "none" so that the others read the image themselves). Else sends the source
 * (CACHE/UID/KEY.part/image.sqsh when an earlier job left one here, else image) to the
 * step's nodes, then its record. 1: sent, this node's own copy verified in copy[]; 0:
 * nothing sent ("none" said, best effort): read the image itself. */
int sq_copy_send(const char *cache_dir, const char *key, const char *image, const char *jobstep,
		 const char *sbcast, int have_tree, char *copy, size_t copylen);

/* A receiver's wait for its step's record is bounded (issue 40: a node that joined a later
 * step whose first node's kept container started earlier waited for the job's whole
 * life, nobody sending, and never extracted): no copy begun in first_s seconds (the
 * plugstack key local_cache_copy_wait, 90 by default), or no record SQ_COPY_RECORD_S
 * seconds plus SIZE / SQ_COPY_DIGEST_BPS (the first node's digest at the extraction's
 * floor) after the copy stopped growing: read the image. */
#define SQ_COPY_FIRST_DEFAULT_S 90
#define SQ_COPY_RECORD_S 45
#define SQ_COPY_DIGEST_BPS (16LL << 20)

/* On the others: wait for the record of jobstep (a bounded time, above; first_s <= 0:
 * the default). 1: the copy verified, its path in copy[]; 0: read the image itself. */
int sq_copy_receive(const char *cache_dir, const char *image, const char *jobstep, int first_s,
		    char *copy, size_t copylen);

#endif
