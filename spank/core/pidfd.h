/*
 * pidfd.h: hold a process by a descriptor, not by its number.
 *
 * A PID can be reaped and reused before the tasks join; a pidfd cannot: signals sent
 * through it reach that process or fail with ESRCH. Raw syscalls, because glibc only
 * has wrappers from 2.36 and bookworm ships 2.36 but older build hosts may not.
 */
#ifndef SQUALL_PIDFD_H
#define SQUALL_PIDFD_H

#include <sys/types.h>

int sq_pidfd_open(pid_t pid);
int sq_pidfd_signal(int pidfd, int sig);
/* Wait up to timeout_ms for the process to exit. 1 exited, 0 timeout, -1 error. */
int sq_pidfd_wait_exit(int pidfd, int timeout_ms);

#endif
