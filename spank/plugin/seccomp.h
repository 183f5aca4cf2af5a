/*
 * seccomp.h: the filter unprivileged tasks run under, as with Pyxis and Enroot's
 * enroot-nsenter: the chown and set*id families "succeed" without doing anything.
 *
 * A container user (remapped to root or not) cannot really chown files to ids its user
 * namespace does not map, nor switch to another user; package managers (dpkg, rpm, apt's
 * sandbox, yum) try both and give up. With the filter they carry on: chown, fchown,
 * fchownat, lchown, setuid, setgid, setreuid, setregid, setresuid, setresgid, setgroups
 * return 0 and change nothing; setfsuid/setfsgid likewise, except with -1, which only
 * asks for the current value and runs for real. Other architectures than the process's
 * own (x32, i386 calls on x86_64) are let through, as Enroot does. /proc/self/status then
 * shows `Seccomp: 2`. The filter is inherited across exec and cannot be removed.
 */
#ifndef SQUALL_PLUGIN_SECCOMP_H
#define SQUALL_PLUGIN_SECCOMP_H

#include <stddef.h>

/* Install it in the calling thread (a task, in task_init, after joining the container).
 * 0 ok; -1 with err (an unsupported architecture installs nothing and returns 0). */
int sq_seccomp_install(char *err, size_t errlen);

#endif
