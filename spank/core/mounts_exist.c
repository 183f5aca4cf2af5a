/* mounts_exist.c: do the bind sources exist, as seen by the calling user? */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "mounts_exist.h"
#include "strbuf.h"

int sq_mounts_check_sources(const struct sq_mount_list *list, char *err, size_t errlen)
{
	char show[SQ_SHOW_MAX];
	struct stat st;
	size_t i;

	for (i = 0; i < list->count; i++) {
		const struct sq_mount *m = &list->items[i];

		if (m->type != SQ_MOUNT_BIND)
			continue;
		if (stat(m->source, &st) == 0)
			continue;
		/* Pyxis's words for a missing source, which its tests and users' scripts grep. */
		if (errno == ENOENT || errno == ENOTDIR)
			return sq_errf(err, errlen, "--container-mounts: source path does not "
				       "exist: %s (create it or fix the path; it must exist on "
				       "every node)", sq_show(m->source, show, sizeof(show)));
		return sq_errf(err, errlen, "--container-mounts: source '%s': %s (create it "
			       "or fix the path; it must exist on every node)",
			       sq_show(m->source, show, sizeof(show)), strerror(errno));
	}
	return 0;
}
