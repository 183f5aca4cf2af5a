/*
 * srunwatch.h: has the job's srun gone? While the image is built in user_init, slurmstepd
 * defers a cancelled step's kill until the step's tasks run, so a build kept the step (and
 * the node, COMPLETING) until it ended by itself, hours later for an endless layer. srun
 * ends with a cancelled job (scancel, Ctrl-C, the batch script's end); slurmstepd's TCP
 * connections to it then turn CLOSE_WAIT, which the plugin reads in /proc/self/net/tcp*
 * (core/tcpstate.h) once a second, costing no one an RPC.
 */
#ifndef SQUALL_PLUGIN_SRUNWATCH_H
#define SQUALL_PLUGIN_SRUNWATCH_H

#define SQ_SRUN_WATCH_MAX 16

struct sq_srun_watch {
	unsigned long inodes[SQ_SRUN_WATCH_MAX]; /* the TCP sockets established now */
	int n;
};

/* Remember slurmstepd's established TCP sockets (its connections to srun). */
void sq_srun_watch_init(struct sq_srun_watch *w);
/* 1 when srun has gone: no watched socket is open any more (each is CLOSE_WAIT, or in
 * neither TCP table: slurmstepd's I/O thread closed it after srun did); 0 otherwise, when
 * nothing is watched, and when /proc/self/net/tcp* cannot be read. Only the sockets open
 * when the build started are watched (srun's I/O connections: slurmstepd makes them before
 * user_init); one made later is never a reason to stop a build. arg: the watch. */
int sq_srun_gone(void *arg);

#endif
