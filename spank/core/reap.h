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
 * it cannot name another session as long as there is something to reap. A mount
 * namespace's number has no such guarantee: it is freed with the namespace's last process
 * and given to the next namespace made, so namespaces are reaped by a descriptor that
 * holds them (sq_mntns_pin), never by a number kept from earlier (issue 30).
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

/* The identity of a process's mount namespace (stat of /proc/PID/ns/mnt). 0 ok, -1 gone.
 * A number only: the kernel gives a freed namespace's inode number to the next namespace
 * made, at once, so it names the same namespace only while a descriptor of it is held. */
int sq_mntns_of(long pid, unsigned long long *dev, unsigned long long *ino);

/* The identity of the mount namespace nsfd holds. 0 ok, -1 not a mount namespace. */
int sq_mntns_fd_id(int nsfd, unsigned long long *dev, unsigned long long *ino);

/* A descriptor of pid's mount namespace (O_CLOEXEC; the caller closes it): while it is
 * open the namespace, and so its number, is not freed. Taken only when pid is uid's and
 * still the same process once it is open (checked through a pidfd). -1 otherwise. */
int sq_mntns_pin(long pid, long uid);

/* Descriptors of the distinct mount namespaces of uid's processes in session sid other
 * than the caller's own, as sq_mntns_pin takes them: up to max stored in fds (the caller
 * closes them). Returns how many were stored. */
int sq_session_mntns(long sid, long uid, int *fds, int max);

/* A descriptor of the mount namespace numbered (dev, ino), taken from a process of uid in
 * it, but only when that namespace is owned by the user namespace that owns the mount
 * namespace `owner` (a descriptor the caller holds) and that user namespace is not the
 * caller's: a number recorded earlier may name a namespace made since by anyone, but one
 * made in the same container's user namespace is that container's (a step's layer).
 * -1 when there is none. */
int sq_mntns_pin_owned(unsigned long long dev, unsigned long long ino, long uid, int owner);

/* A process of uid in the mount namespace (dev, ino): its PID, -1 when there is none. */
long sq_mntns_find(unsigned long long dev, unsigned long long ino, long uid);

/* SIGKILL every process of uid in the mount namespace nsfd holds, except `except`. Each is
 * signalled through a pidfd opened before it was checked, so a PID freed and reused between
 * the check and the signal is not hit. Returns how many were signalled, -1 when /proc
 * cannot be read or nsfd is not a mount namespace. */
int sq_reap_mntns(int nsfd, long uid, long except);

#endif
