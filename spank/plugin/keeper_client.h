/*
 * keeper.h: the container's runtime runs under squall-keeper, outside slurmstepd's
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
 * epilog ends whatever a record (keeper-JOBID.STEPID in the runtime directory) still names.
 */
#ifndef SQUALL_PLUGIN_KEEPER_H
#define SQUALL_PLUGIN_KEEPER_H

#include <stddef.h>
#include <stdint.h>
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

/* The epilog's record of a running keeper: DIR/keeper-JOBID.WHAT (WHAT: the step id, or
 * kept-KEY for a container kept for the job). */
int sq_keeper_record(const char *dir, uint32_t jobid, const char *what,
		     const struct sq_keeper *k, char *err, size_t errlen);
void sq_keeper_forget(const char *dir, uint32_t jobid, const char *what);
/* A step's layer (layer.h), for the epilog and --container-name=JOBID.STEPID:
 * DIR/layer-JOBID.STEPID holds the device and inode of its mount namespace. */
int sq_layer_record(const char *dir, uint32_t jobid, uint32_t stepid, unsigned long long dev,
		    unsigned long long ino);
void sq_layer_forget(const char *dir, uint32_t jobid, uint32_t stepid);
/* Read that record. 0 ok, -1 none (the step made no layer) or unreadable. */
int sq_layer_read(const char *dir, uint32_t jobid, uint32_t stepid, unsigned long long *dev,
		  unsigned long long *ino);
/* The same for a running named container's shared layer, for the steps that join it:
 * DIR/layer-RUNTIME_NAME, written by the step that started it, removed at its end. */
int sq_layer_record_named(const char *dir, const char *name, unsigned long long dev,
			  unsigned long long ino);
int sq_layer_read_named(const char *dir, const char *name, unsigned long long *dev,
			unsigned long long *ino);
void sq_layer_forget_named(const char *dir, const char *name);

/* Job epilog, as root: end every container the job's records in dirfd (the user's runtime
 * directory, opened O_NOFOLLOW and checked) still name (keeper, runtime, everything of uid
 * in its session and its mount namespaces) and remove the records, every process of uid
 * left in a recorded layer's mount namespace, and the job's kept-JOBID-* sockets and locks.
 * Records are the user's files: read only when regular (never a FIFO, never through a
 * link), relative to dirfd. Returns how many were running. */
int sq_keeper_sweep_job(int dirfd, uint32_t jobid, uid_t uid);

#endif
