/* image_record.c: see image_record.h. */
#include "image_record.h"

#include <stdio.h>
#include <sys/stat.h>

#include <slurm/spank.h>

#include "jobrecord.h"
#include "runcmd.h"
#include "step.h"

#define SQ_JOBRECORD SQ_LIBEXEC_DIR "/squall-jobrecord"

static void step_text(uint32_t stepid, char *buf, size_t len)
{
	if (stepid == SQ_STEP_BATCH)
		snprintf(buf, len, "batch");
	else
		snprintf(buf, len, "%u", (unsigned)stepid);
}

/* squall-jobrecord JOBID ENTRY as root, detached: nobody waits for the controller. */
static void start_recorder(uint32_t jobid, char *entry)
{
	static gid_t root_group[1] = { 0 };
	const struct sq_cred root = { 0, 0, root_group, 1 };
	char id[16], err[512];
	char *argv[] = { "squall-jobrecord", id, entry, NULL };
	char *envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
	struct sq_child child;

	snprintf(id, sizeof(id), "%u", (unsigned)jobid);
	if (sq_spawn_detached(SQ_JOBRECORD, argv, envp, &root, NULL, 0, &child, err,
			      sizeof(err)) < 0) {
		slurm_info("squall: job %u: the image is not recorded in its AdminComment: %s",
			   (unsigned)jobid, err);
		return;
	}
	sq_child_close(&child);
}

void sq_jobrecord_note(const struct sq_jobrecord *r)
{
	char entry[4096], step[16];
	struct stat st = { 0 };

	if (r->path == NULL || r->ref == NULL)
		return;
	if (!r->from_registry && stat(r->path, &st) < 0)
		return;
	if (sq_jobrecord_entry(r->ref, r->path, r->from_registry, (long long)st.st_size,
			       (long long)st.st_mtime, entry, sizeof(entry)) < 0) {
		slurm_info("squall: job %u: the image's reference is too long to record",
			   (unsigned)r->jobid);
		return;
	}
	step_text(r->stepid, step, sizeof(step));
	/* "squall-image=" is the comment's prefix, not the log's */
	slurm_info("squall: job %u.%s: image %s", (unsigned)r->jobid, step, entry + 13);
	if (r->nodeid == 0)
		start_recorder(r->jobid, entry);
}
