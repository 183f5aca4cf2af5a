/*
 * efa_internal.h: helpers shared by the efa_*.c files and squall-efa-hook.
 * Internal to the core: no .cdef, Python reaches them only through efa.h.
 */
#ifndef SQUALL_CORE_EFA_INTERNAL_H
#define SQUALL_CORE_EFA_INTERNAL_H

#include <stddef.h>

struct sq_efa_node;
struct sq_efa_lib;

/* Fill node->profile_* from efa_profiles.def for node->instance_type. */
void sq_efa_profile_apply(struct sq_efa_node *node);

/* Open path (relative to the root) inside the directory tree rootfd without ever
 * leaving it: symlinks, absolute ones included, resolve against rootfd, as they
 * will once the container's root is switched. -1 with errno on failure. */
int sq_efa_open_in(int rootfd, const char *path, int flags);

/* Look for a library in the directories dirs[0..] (paths relative to rootfd, no
 * leading '/'), the first file whose name starts with `stem` and, when `dotso_only`
 * is set, ends in ".so". On success fills lib (dir and prefix as "/" + the relative
 * path, prefix = the dir's parent) and returns 1; 0 when not found. */
int sq_efa_find_lib(int rootfd, const char *const *dirs, const char *stem,
		    int dotso_only, struct sq_efa_lib *lib);

/* For an aws-ofi-nccl library found by sq_efa_find_lib: pick the NCCL_NET_PLUGIN
 * suffix from the files in lib->dir and read the network name the library carries. */
void sq_efa_ofi_describe(int rootfd, struct sq_efa_lib *lib);

/* The value of the last NAME=... line in a KEY=VALUE file (quotes and a leading
 * "export " removed), opened inside rootfd (AT_FDCWD: a host path). 1 found, 0 not. */
int sq_efa_env_file_get(int rootfd, const char *path, const char *name,
			char *out, size_t outlen);

#endif
