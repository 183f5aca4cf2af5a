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
 *
 * The new /dev replaces the old one instead of covering it: as Enroot detaches the node's
 * /dev before mounting its restricted one, the mounts on the container's /dev (the node's,
 * bound recursively by Enroot, with its /dev/shm, /dev/pts, /dev/mqueue, /dev/hugepages)
 * are detached and the new tree is moved onto the rootfs's own /dev directory (open_tree
 * and move_mount, Linux 5.2). Nothing of the node's /dev stays in the mount namespace but
 * the device nodes bound one by one.
 *
 * Locked mounts do not protect these: the container's mount namespace is owned by its user
 * namespace (Enroot made both), and every mount here is made in it by a process of that
 * user namespace, so none is locked (only mounts copied or propagated from a more
 * privileged mount namespace are, like the submounts of Enroot's copy of the node's /dev).
 * A container root (--container-remap-root) can unmount each of them; what it finds
 * beneath is the new tmpfs's empty file or directory, or the rootfs's own /dev, never the
 * node's (tests/unit/test_plugin_ipcdev.py).
 */
#ifndef SQUALL_PLUGIN_IPCDEV_H
#define SQUALL_PLUGIN_IPCDEV_H

/* In a process that is in the container's user namespace (with its capabilities there)
 * and in the new IPC namespace: join the mount namespace ns_mnt, enter the container's root
 * (root_fd) and rebuild /dev there. Uses only system calls (it runs in a fork of
 * slurmstepd). 0 ok; -1 with *what naming the step that failed (errno set): also when
 * a mount on /dev cannot be detached (EBUSY), rather than leave the node's beneath. */
int sq_ipcdev_setup(int ns_mnt, int root_fd, const char **what);

#endif
