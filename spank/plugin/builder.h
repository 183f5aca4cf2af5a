/*
 * builder.h: the image builder, the one account that writes the shared image cache.
 *
 * Its name is the first word of the first line of /etc/squall/builder that is neither
 * blank nor a comment ('#'), else squall-builder; "none" means no builder. The file is
 * read bounded (core/safeopen.h: never opened unless it is a regular file, not through a
 * link, at most SQ_BUILDER_CONF_MAX bytes, owned by root and writable by no one else): a
 * bad one is treated as absent, with one line saying so. A name with no account on the
 * node, or one that is root's, also means no builder. The builder runs with its own uid,
 * gid and supplementary groups and an environment built from nothing (PATH, HOME, USER,
 * LOGNAME, LANG): nothing of the job's reaches it.
 */
#ifndef SQUALL_PLUGIN_BUILDER_H
#define SQUALL_PLUGIN_BUILDER_H

#include <limits.h>
#include <stddef.h>

#include "runcmd.h"

#define SQ_BUILDER_CONF "/etc/squall/builder"
#define SQ_BUILDER_DEFAULT "squall-builder"
#define SQ_BUILDER_CONF_MAX 4096
#define SQ_BUILDER_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct sq_builder {
	char name[64];
	struct sq_cred cred;          /* uid, gid and groups (always set) */
	char *envp[6];                /* into the strings below, NULL-terminated */
	char env_path[sizeof("PATH=") + sizeof(SQ_BUILDER_PATH)];
	char env_home[PATH_MAX + 8];
	char env_user[80];
	char env_logname[80];
};

/* The builder's name from conf (NULL: SQ_BUILDER_CONF) into name: 1 a name (the
 * default when the file is missing or bad), 0 none ("none"). note: "" or one line about a
 * bad file. */
int sq_builder_name(const char *conf, char *name, size_t namelen, char *note,
		    size_t notelen);

/* The account name on this node: 1 found (b filled: free with sq_builder_free), 0 no
 * usable account (note: "" when there is none, else one line why). */
int sq_builder_lookup(const char *name, struct sq_builder *b, char *note, size_t notelen);

/* Both: 1 the builder (b filled), 0 none (note as above). */
int sq_builder_find(const char *conf, struct sq_builder *b, char *note, size_t notelen);

void sq_builder_free(struct sq_builder *b);

#endif
