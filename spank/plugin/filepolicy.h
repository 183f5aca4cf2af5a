/*
 * filepolicy.h: the site image policy for a .sqsh file named by path (docs/registries.md
 * "Local files").
 *
 * Called as the job user in user_init. No /etc/containers/policy.json: every file runs.
 * Otherwise the policy's squall-sqsh transport, compiled by `sqshbuild policy compile`
 * into /run/squall/policy-sqsh (core/sqshpolicy.h), decides on the file's real path; that
 * compile runs here, as root, when the compiled file is missing, not root's, or stamped
 * with another state of the policy file (so a changed policy applies at the next step).
 * A policy file without a squall-sqsh transport judges no file.
 */
#ifndef SQUALL_PLUGIN_FILEPOLICY_H
#define SQUALL_PLUGIN_FILEPOLICY_H

#include <limits.h>
#include <stddef.h>

/* 1 when the site policy judged the file at path and lets it run: real is its real path,
 * which the caller runs from then on (a link the user swaps after the check leads
 * nowhere else); 0 when no policy judges files (real untouched); -1 with the one line in
 * err (a refusal, or a policy that cannot be compiled). sqshbuild: its executable. */
int sq_filepolicy_check(const char *path, const char *sqshbuild, char real[PATH_MAX],
			char *err, size_t errlen);

#endif
