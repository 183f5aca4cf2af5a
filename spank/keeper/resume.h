/*
 * resume.h: resuming an extraction of the node-local cache cut short by a job's end
 * (nodecache.h "Resuming an extraction cut short": the listing and completeness rules are
 * pure and in the core). KEY.part/started records when the first run began.
 */
#ifndef SQUALL_PLUGIN_RESUME_H
#define SQUALL_PLUGIN_RESUME_H

#include <stddef.h>

/* The image's superblock inode count, 0 when unknown. */
unsigned long sq_resume_image_inodes(const char *image);
/* KEY.part/started: when the first run of this extraction began; 0 when unreadable. */
long long sq_resume_read_started(int pfd);
int sq_resume_write_started(int pfd, long long t);
/* What a plan found and cost. */
struct sq_resume_cost {
	size_t kept;    /* complete files, left out of the run */
	size_t stats;   /* files looked at on disk (the others were in the last plan) */
	int links;      /* more names than inodes: the image has hard links */
};
/* Write KEY.part/exclude: the regular files of listing (KEY.part/list) already complete
 * in KEY.part/rootfs, so that the next run extracts only the rest. When the image has hard
 * links (more names than inodes), a complete file that may be a link of one still missing
 * (same size, time, mode, owner) is extracted again, so that unsquashfs links the two.
 * reuse: the last plan (KEY.part/exclude, written by this squall: whole, in the listing's
 * order) holds files complete then and untouched since: only the others are looked at on
 * disk. The plan is written aside and renamed over the last one. 0 ok, -1 when the listing
 * cannot be trusted (extract from scratch). */
int sq_resume_plan(int pfd, long long first_start, unsigned long inodes, int reuse,
		   struct sq_resume_cost *cost);
/* The directories of KEY.part/list closed to their owner by their listed mode (a 0555 one
 * given its mode by an earlier run) opened to it again, from the listing alone (no walk of
 * the tree). 0 ok, -1 no listing. */
int sq_resume_open_dirs(int pfd);
/* Give every directory and regular file of KEY.part/rootfs (at path rootfs) the mode of
 * KEY.part/list, set-uid, set-gid and sticky included (unsquashfs run by a user drops
 * them). 0 ok, -1 failed. */
int sq_resume_apply_modes(int pfd, const char *rootfs);
/* The distinct inodes of the tree at path (it is on one file system), 0 on failure. */
unsigned long sq_resume_tree_inodes(const char *path);

#endif
