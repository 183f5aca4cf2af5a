/*
 * reap.h: end every process of a container, found through /proc, never by a PID list kept
 * from earlier.
 *
 * A container's runtime runs in a session of its own (squall-keeper calls setsid), so its
 * processes are the session's members: the runtime, Enroot's fuse-shim, squashfuse,
 * fuse-overlayfs, hooks. Tasks that joined it share its mount namespace. Only processes of
 * the given user are touched (the owner of /proc/PID), so a caller running as root cannot
 * be steered by a forged record into another user's processes.
 *
 * A session id is a PID number that the kernel keeps allocated while any member lives, so
 * it cannot name another session as long as there is something to reap.
 */
#ifndef SQUALL_CORE_REAP_H
#define SQUALL_CORE_REAP_H

#include <stddef.h>

/* Fields 4-6 of a /proc/PID/stat text (parent, process group, session), counted after the
 * command name as sq_procstat_parse does. 0 ok, -1 malformed. */
int sq_procstat_ids(const char *text, size_t len, long *ppid, long *pgrp, long *session);

/* 1 when pid's real user id is uid (0: another, or gone). Read from /proc/PID/status,
 * not from the owner of /proc/PID: a process that ran a program in a user namespace where
 * the file's owner is not mapped (Enroot's, in the container) is not dumpable, and its
 * /proc files then belong to root. */
int sq_proc_owned_by(long pid, long uid);

/* SIGKILL every process of uid whose session is sid, except the PID `except` (-1: none).
 * Returns how many were signalled (0: none is left), -1 when /proc cannot be read. */
int sq_reap_session(long sid, long uid, long except);

/* The identity of a process's mount namespace (stat of /proc/PID/ns/mnt). 0 ok, -1 gone. */
int sq_mntns_of(long pid, unsigned long long *dev, unsigned long long *ino);

/* The mount namespaces of uid's processes in session sid other than the caller's own:
 * up to max distinct (dev, ino) pairs stored. Returns how many were stored. */
int sq_session_mntns(long sid, long uid, unsigned long long *devs, unsigned long long *inos,
		     int max);

/* A process of uid in the mount namespace (dev, ino): its PID, -1 when there is none. */
long sq_mntns_find(unsigned long long dev, unsigned long long ino, long uid);

/* SIGKILL every process of uid in the mount namespace (dev, ino), except `except`.
 * Returns how many were signalled, -1 when /proc cannot be read. */
int sq_reap_mntns(unsigned long long dev, unsigned long long ino, long uid, long except);

#endif
