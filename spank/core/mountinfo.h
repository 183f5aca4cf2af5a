/*
 * mountinfo.h: which of a container's mounts are its own writable scratch.
 *
 * A step on the job's kept container gets every tmpfs the runtime mounted in the container
 * (Enroot's /tmp, /var/run, /var/lock, a --container-mounts tmpfs) again, empty, and every
 * other mount bound as it is (squall-layer). A tmpfs bound in from the host (/dev/shm,
 * the node's /tmp) looks the same in the container's /proc/PID/mountinfo; what tells them
 * apart is the device: the host's appear in the host's mountinfo too.
 */
#ifndef SQUALL_CORE_MOUNTINFO_H
#define SQUALL_CORE_MOUNTINFO_H

#include <stddef.h>

/* The devices ("MAJ:MIN") of the tmpfs mounts in the container's mountinfo text that do
 * not appear in the host's, space-separated, each once, into out. 0 ok; -1 when out is
 * too small (out then holds what fit). */
int sq_mountinfo_fresh_tmpfs(const char *container, const char *host, char *out,
			     size_t outlen);

#endif
