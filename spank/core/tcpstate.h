/*
 * tcpstate.h: the state of one of this process's TCP sockets, from the text of
 * /proc/self/net/tcp or tcp6, found by the socket's inode (what /proc/self/fd/N links to:
 * "socket:[INODE]"). What the plugin watches while a build runs in user_init: slurmstepd
 * defers a cancelled step's kill until its tasks run, so the plugin sees the job's srun go
 * away instead (its connections to slurmstepd turn CLOSE_WAIT) and stops the build.
 */
#ifndef SQUALL_CORE_TCPSTATE_H
#define SQUALL_CORE_TCPSTATE_H

#define SQ_TCP_ESTABLISHED 0x01
#define SQ_TCP_CLOSE_WAIT 0x08

/* The "st" field of the line whose inode is `inode` (e.g. SQ_TCP_ESTABLISHED), or -1 when
 * no line has it. Pure: the text only. */
int sq_tcp_state(const char *text, unsigned long inode);

#endif
