/*
 * nsholder.h: --container-unshare: new net, ipc, uts namespaces for a container, shared by
 * all its tasks and by the steps that join it.
 *
 * Enroot has no option for them, and the container's first process runs without
 * capabilities, so they are made beside it: once the container has started, a child of
 * slurmstepd drops to the job user, joins the container's user namespace (where the user,
 * its owner, has every capability), unshares the namespaces asked for, brings the loopback
 * interface of a new network namespace up (with ipc, a child of it gives the container's
 * mount namespace a private /dev/shm and /dev/mqueue, ipcdev.h), and stays, holding them,
 * as long as the container's first process lives (it waits on its pidfd, in its own
 * session, with job signals ignored; a SIGKILL ends it with the step). The step keeps descriptors on the
 * namespaces; tasks setns() into them after the container's user namespace. Other steps
 * find the holder through the running record (running.h: its PID and start time) and
 * check that it belongs to the container's user namespace before joining.
 */
#ifndef SQUALL_PLUGIN_NSHOLDER_H
#define SQUALL_PLUGIN_NSHOLDER_H

#include <stddef.h>
#include <sys/types.h>

struct sq_nsholder {
	pid_t pid;                      /* holder process; -1: none */
	unsigned long long starttime;
	int pidfd;
	int owned;                      /* 1: this step made it and ends it */
	int fd[3];                      /* net, ipc, uts; -1: shared with the node */
};

void sq_nsholder_init(struct sq_nsholder *h);

/* The container the namespaces are made for. */
struct sq_nsholder_target {
	int ns_user;          /* its user namespace; -1: it shares ours */
	int container_pidfd;  /* its first process: the holder lives as long as it does */
	int ns_mnt;           /* the mount namespace the step's tasks join, and */
	int root_fd;          /* their root: with ipc, a private /dev there (ipcdev.h) */
};

/* Make the namespaces in mask (SQ_NS_* bits, unshare.h) for the container t. uid/gid: the
 * job user. 0 ok, -1 with err. */
int sq_nsholder_make(struct sq_nsholder *h, int mask, const struct sq_nsholder_target *t,
		     uid_t uid, gid_t gid, char *err, size_t errlen);

/* Hold the namespaces another step's holder keeps (its PID and start time from the running
 * record) after checking that it is in the user namespace ns_user. 0 ok; 1 when it is gone
 * or not that container's; -1 with err. */
int sq_nsholder_attach(struct sq_nsholder *h, pid_t pid, unsigned long long starttime,
		       int ns_user, char *err, size_t errlen);

/* SQ_NS_* bits of the namespaces h holds apart from the node's. */
int sq_nsholder_mask(const struct sq_nsholder *h);

/* In a task, after joining the container's user namespace. 0 ok, -1 with err. */
int sq_nsholder_join(const struct sq_nsholder *h, char *err, size_t errlen);

/* Close everything; an owned holder is killed and reaped. */
void sq_nsholder_release(struct sq_nsholder *h);

#endif
