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

#define SQ_PINMEMO_DIR "/run/squall/resolved"

/* The memos are named by hash, 16 hex digits of (job, text), the caller's (image.c). */

/* 1 when an earlier step of job (CLUSTER-UID-JOBID) resolved text on this node under the
 * settings in force now: *path (heap) and the identity that file had. 0 none. The caller
 * checks that the file is still the same. */
int sq_pinmemo_find(const char *dir, const char *job, const char *text, const char *hash,
		    char **path, char identity[17]);
/* Remember path (and its identity) for the job's later steps (best effort). */
void sq_pinmemo_keep(const char *dir, const char *job, const char *text, const char *hash,
		     const char *path, const char *identity);
/* The job epilog: remove the job's memos (as root). */
void sq_pinmemo_drop_job(const char *dir, uint32_t jobid);

#endif
