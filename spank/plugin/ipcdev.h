/*
 * ipcdev.h: the /dev of a container with an IPC namespace of its own
 * (--container-unshare=ipc).
 *
 * A new IPC namespace hides System V objects, but POSIX shared memory lives in /dev/shm and
 * message queues in /dev/mqueue: left as the node's, they stay shared with the node and
 * with every other container. As Enroot does when IPC is unshared, the container gets a
 * restricted /dev (a tmpfs holding null, zero, full, random, urandom, tty, a new devpts
 * instance, the usual fd links) with a fresh tmpfs on /dev/shm and a fresh mqueue of its
 * own IPC namespace on /dev/mqueue. The accelerators and fabric the container already had
 * are kept (nvidia*, nvidia-caps, infiniband, gdrdrv, dri, kfd: the hooks that bound them
 * ran before), as are /dev/hugepages and /dev/log, as in Enroot's restricted /dev.
 */
#ifndef SQUALL_PLUGIN_IPCDEV_H
#define SQUALL_PLUGIN_IPCDEV_H

/* In a process that is in the container's user namespace (with its capabilities there)
 * and in the new IPC namespace: join the mount namespace ns_mnt, enter the container's root
 * (root_fd) and rebuild /dev there. Uses only system calls (it runs in a fork of
 * slurmstepd). 0 ok; -1 with *what naming the step that failed (errno set). */
int sq_ipcdev_setup(int ns_mnt, int root_fd, const char **what);

#endif
