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
/* 1 when srun has gone: every watched socket is closed by srun (CLOSE_WAIT) or gone, and
 * at least one is CLOSE_WAIT; 0 otherwise (nothing watched: 0). arg: the watch. */
int sq_srun_gone(void *arg);

#endif
