/*
 * keeper_client.h: the plugin's side of squall-keeper's protocol (the keeper itself is
 * spank/keeper/). A leaf: called by container.c with its own struct and plain values, it
 * calls nothing of the plugin but runcmd.c.
 *
 * The container's runtime runs under squall-keeper, outside slurmstepd's
 * process tree, so that job signals never reach it, and the keeper ends it.
 *
 * Why: Slurm signals every process under slurmstepd (proctrack/linuxproc), the runtime
 * included, and Enroot's runtime does not survive that: squashfuse dies on SIGUSR1,
 * SIGUSR2 and SIGALRM and unmounts on SIGTERM and SIGHUP, and the SIGCONT Slurm sends
 * before every warning signal, cancel, time limit and resume lets Enroot's stopped
 * fuse-shim exit, which tears the mounts down. Under proctrack/cgroup Slurm spares it, but
 * then nothing but the plugin's exit ends it, and a crashed slurmstepd leaves it running.
 *
 * How: slurmstepd forks a child that calls setsid(), becomes the job user and forks the
 * keeper, then exits: the keeper is re-parented to init, in a session of its own.
 * The keeper starts the runtime (`enroot start ...`, unchanged) as its child with the job
 * signals ignored and in a process group of its own, and tells the plugin over a
 * SOCK_SEQPACKET socket (protocol.h: its descriptors and messages).
 * The keeper also holds a pidfd of that slurmstepd: when slurmstepd dies, it ends
 * the container and the tasks left in it. If the keeper itself is killed, the runtime's
 * stopped process group is orphaned and the kernel's SIGHUP + SIGCONT end it. The job
 * epilog ends whatever a record (keeper-JOBID.STEPID in the runtime directory, records.h)
 * still names.
 */
#ifndef SQUALL_PLUGIN_KEEPER_CLIENT_H
#define SQUALL_PLUGIN_KEEPER_CLIENT_H

#include <stddef.h>
#include <sys/types.h>

#include "protocol.h"
#include "runcmd.h"

struct sq_keeper {
	pid_t pid;                     /* for messages and the record; use pidfd */
	unsigned long long starttime;  /* with pid: names the keeper in the record */
	int pidfd;
	int sock;                      /* the plugin's end of the control socket */
};

void sq_keeper_init(struct sq_keeper *k);

/* Run argv (argv[0] the runtime) under the keeper at keeper_path (keeper_args, NULL-
 * terminated, before the runtime's: NULL, or "--job" SOCKET IDLE_S), as cred's user, with
 * envp, its stdout and stderr captured in *capture. Returns once the runtime's first
 * process has stopped itself: 0 with *runtime_pid and *runtime_pidfd (that process, held);
 * -1 with err ("container start failed (...): <runtime's last lines>") after ending
 * whatever was started. timeout_s: give up after that long (0: never). */
int sq_keeper_start(struct sq_keeper *k, const char *keeper_path,
		    const char *const *keeper_args, char *const argv[],
		    char *const envp[], const struct sq_cred *cred, struct sq_child *capture,
		    int timeout_s, pid_t *runtime_pid, int *runtime_pidfd, char *err,
		    size_t errlen);

/* Ask the keeper to end the container and wait for it (SIGKILL and a sweep of its
 * session, as uid's processes, when it does not go in time). Safe on a keeper never
 * started; leaves k initialised. */
void sq_keeper_stop(struct sq_keeper *k, uid_t uid);

/* A step leaves the job's kept container: "bye", then the descriptors are closed; the
 * keeper and its container go on. Leaves k initialised. */
void sq_keeper_leave(struct sq_keeper *k);

/* A step joins the job's kept container through its keeper's socket sock: "attach", then
 * "attached KPID PID" with pidfds of both (within 300 s: another step may be starting
 * it). k takes the socket and the keeper; *pid, *pidfd: the container's first process.
 * 0 ok; -1 with err (sock is left to the caller). */
int sq_keeper_ask_attach(int sock, struct sq_keeper *k, pid_t *pid, int *pidfd, char *err,
			 size_t errlen);
/* Tell k's keeper the step's layer, "layer DEV INO" with a descriptor of its mount
 * namespace (ns_mnt) that the keeper holds: the number still names this layer when the
 * keeper reaps by it after this slurmstepd died. Nothing when k has no socket. */
void sq_keeper_tell_layer(const struct sq_keeper *k, int ns_mnt, unsigned long long dev,
			  unsigned long long ino);

#endif
