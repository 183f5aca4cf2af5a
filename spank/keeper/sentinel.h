/*
 * sentinel.h: keeps a container's own first process out of `enroot list -f`.
 *
 * Enroot's `list -f` shows one process per mount namespace, the one with the lowest PID
 * (lsns), when Enroot's lock file /.lock is under its root. For a container squall starts
 * that is the runtime's stopped first process (`sh -c 'kill -STOP $$; exit 0'`): squall's
 * machinery, since the steps' tasks run in layers of their own (plugin/layer.h), which
 * `enroot list -f` shows. The keeper forks a sentinel before it starts the runtime, so the sentinel's PID
 * is the lower; once the container is set up the sentinel joins its user and mount
 * namespaces and makes the container's /proc its root, where there is no /.lock: the
 * namespace is then represented by a process `enroot list -f` skips.
 */
#ifndef SQUALL_PLUGIN_SENTINEL_H
#define SQUALL_PLUGIN_SENTINEL_H

#include <sys/types.h>

struct sq_sentinel {
	pid_t pid;      /* -1: none */
	int go;         /* write end of its pipe, or -1 */
};

/* Fork the sentinel (before the runtime). It keeps open only its pipe, dies with the
 * caller (PR_SET_PDEATHSIG) and inherits the caller's ignored signals. Best effort:
 * s->pid is -1 when it could not be made. */
void sq_sentinel_fork(struct sq_sentinel *s);
/* The runtime's first process is runtime and has set the container up: the sentinel takes
 * its place in the mount namespace, or exits when its PID is not the lower one. */
void sq_sentinel_place(struct sq_sentinel *s, pid_t runtime);

#endif
