/*
 * image_record.h: the image a container step ran, where admins look (docs/admin.md).
 *
 * Every node of the step says it in slurmd's log, one line; the step's first node starts
 * squall-jobrecord (tools/), detached and as root, which adds the image's word
 * (core/jobrecord.h) to the job's AdminComment once, so that `sacct -o AdminComment`
 * keeps it after the job. Nothing here can fail the step: a record that cannot be made
 * is said in slurmd's log.
 */
#ifndef SQUALL_PLUGIN_IMAGE_RECORD_H
#define SQUALL_PLUGIN_IMAGE_RECORD_H

#include <stdint.h>

struct sq_jobrecord {
	uint32_t jobid, stepid, nodeid;
	const char *ref;       /* --container-image as the user gave it */
	const char *path;      /* the .sqsh the container started from */
	int from_registry;
};

void sq_jobrecord_note(const struct sq_jobrecord *r);

#endif
