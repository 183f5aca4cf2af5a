/*
 * pinmemo.h: what this node's earlier steps of the job resolved a registry reference to,
 * so that a later step starts without running sqshbuild (issue 40: 380-460 ms a step).
 *
 * The job pins a tag's digest for all its steps (image.h), so on one node a later step of
 * the same job with the same --container-image text runs the file an earlier step got.
 * The memo is root's, node-local (/run/squall/resolved/JOBID-HASH, mode 0600 in a 0700
 * directory), names the job key, the text, the path and its identity, and the stat stamps
 * of the files that steer a build (registries.conf, sqshbuild.toml, the builder file). It
 * is not used when the file changed (identity), when those settings changed, or when the
 * site has an image policy (/etc/containers/policy.json: each step must check the pinned
 * digest against the policy in force, which sqshbuild does). The job epilog removes the
 * job's memos. Every failure here means "no memo": the step then runs sqshbuild.
 */
#ifndef SQUALL_PLUGIN_PINMEMO_H
#define SQUALL_PLUGIN_PINMEMO_H

#include <stdint.h>

#include "image.h"

#define SQ_PINMEMO_DIR "/run/squall/resolved"

/* 1 when an earlier step of job (CLUSTER-UID-JOBID) resolved text on this node to a file
 * that is still the same: out->path (heap), identity and from_registry filled. 0 none. */
int sq_pinmemo_find(const char *dir, const char *job, const char *text, struct sq_image *out);
/* Remember img for the job's later steps (best effort). */
void sq_pinmemo_keep(const char *dir, const char *job, const char *text,
		     const struct sq_image *img);
/* The job epilog: remove the job's memos (as root). */
void sq_pinmemo_drop_job(const char *dir, uint32_t jobid);

#endif
