/*
 * layer.h: the mount namespace a step's tasks run in, made on a running container by
 * squall-layer (hooks/squall-layer.c) as the job user.
 *
 *   fresh:  on the job's kept container (kept.h): a new writable root and fresh tmpfs
 *           mounts, so the step's writes never reach the container or another step.
 *   share:  on a container started for a step, named or not: a plain copy of the
 *           container's namespace. The tasks see and write what the container has, as
 *           before; they are the only processes in it, so `enroot list -f` shows the
 *           container by its task, as with Pyxis, and not by the container's stopped first
 *           process (which its keeper's sentinel hides). Steps that join a running named
 *           container join this namespace (join.c), through one of its processes.
 */
#ifndef SQUALL_PLUGIN_LAYER_H
#define SQUALL_PLUGIN_LAYER_H

#include <stddef.h>

#include "container.h"

enum sq_layer_kind { SQ_LAYER_FRESH, SQ_LAYER_SHARE };

/* Make the layer with layer_path (squall-layer) as cred's user and hold it in c instead of
 * the container's mount namespace, root and working directory. 0 ok; -1 with err (the
 * caller goes on without it). */
int sq_layer_make(struct sq_container *c, const char *layer_path, const struct sq_cred *cred,
		  enum sq_layer_kind kind, char *err, size_t errlen);

#endif
