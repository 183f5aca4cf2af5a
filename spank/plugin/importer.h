/*
 * importer.h: the site's image importer (plugstack.conf importer=PATH), with Pyxis's
 * protocol, used instead of sqshbuild for registry images:
 *   IMPORTER get URI   prints the absolute path of a squashfs file (its last stdout line);
 *                      progress goes to stderr, shown when it fails
 *   IMPORTER release   cleans up what get made for the step; called once the container has
 *                      started and again at the step's end, so it must be idempotent
 * run as the job user, stdin /dev/null, with the runtime's environment plus
 * PYXIS_RUNTIME_PATH (plugstack runtime_path), PYXIS_VERSION (the Pyxis release whose
 * protocol this is), SLURM_JOB_UID, SLURM_JOB_ID and SLURM_STEP_ID.
 * URI is Enroot's form: docker://[USER@][REGISTRY#]IMAGE[:TAG] (dockerd:// as given).
 */
#ifndef SQUALL_PLUGIN_IMPORTER_H
#define SQUALL_PLUGIN_IMPORTER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "runcmd.h"

#define SQ_PYXIS_PROTOCOL_VERSION "0.24.0"

struct sq_importer {
	const char *path;
	char **envp;                   /* heap: sq_importer_setup */
	const struct sq_cred *cred;
};

/* envp = runtime_env plus the variables above. 0 ok, -1 with err. */
int sq_importer_setup(struct sq_importer *im, const char *path, char *const runtime_env[],
		      const char *runtime_path, uid_t uid, uint32_t jobid, uint32_t stepid,
		      const struct sq_cred *cred, char *err, size_t errlen);
void sq_importer_free(struct sq_importer *im);

/* Enroot's URI for a --container-image registry reference (heap; NULL: out of memory). */
char *sq_enroot_uri(const char *image_text);

/* `IMPORTER get URI`: *path (heap) is the file it printed. 0 ok, -1 with err naming the
 * image and the importer's last stderr lines. */
int sq_importer_get(const struct sq_importer *im, const char *image_text, char **path,
		    char *err, size_t errlen);
/* `IMPORTER release`; a failure is only logged. */
void sq_importer_release(const struct sq_importer *im);

#endif
