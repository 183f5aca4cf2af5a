/*
 * runcmd.h: every external program (enroot, sqshbuild) runs through here.
 *
 * fork + execve with an argv (never a shell string), as the job user with real,
 * effective and saved ids all set (and the user's groups when called as root),
 * stdin from /dev/null, stdout and stderr each captured into an anonymous memory file
 * (memfd) so their last lines can name a failure even while the child lives on,
 * signal dispositions and mask reset, every other descriptor closed.
 */
#ifndef SQUALL_PLUGIN_RUNCMD_H
#define SQUALL_PLUGIN_RUNCMD_H

#include <stddef.h>
#include <sys/types.h>

struct sq_cred {
	uid_t uid;
	gid_t gid;
	gid_t *groups;    /* set when we are root and must set them; else NULL */
	int ngroups;
};

/* Prepare the credentials of user uid (group gid). Looks up the supplementary groups
 * only when the caller is root (slurmstepd's user_init has set them already). */
int sq_cred_init(struct sq_cred *c, uid_t uid, gid_t gid, char *err, size_t errlen);
void sq_cred_free(struct sq_cred *c);
/* Set c->groups to the supplementary groups of account name (primary group c->gid),
 * always, whoever the caller is. 0 ok, -1 failed. */
int sq_cred_groups(struct sq_cred *c, const char *name);

struct sq_child {
	pid_t pid;
	int out_fd;       /* memfd with the child's stdout */
	int err_fd;       /* memfd with the child's stderr */
};

/* Start path with argv/envp as the user. The child's failures before exec (setuid,
 * exec) are written on its stderr and it exits 127. 0 ok, -1 error. */
int sq_spawn(const char *path, char *const argv[], char *const envp[],
	     const struct sq_cred *cred, struct sq_child *child, char *err, size_t errlen);
/* Wait for the child to exit; *status as waitpid. Closes nothing. */
int sq_child_wait(struct sq_child *child, int *status);
void sq_child_close(struct sq_child *child);

/* Start path detached from the caller: a child becomes the user and forks path's process,
 * then exits (reaped here), so path runs re-parented to init, outside the caller's process
 * tree, in a session of its own whose id is its PID. pass_fds[i] (at most 8) become its
 * descriptors 3+i; stdin, stdout and stderr as sq_spawn. child->pid stays -1 (path reports
 * its own PID if it must). 0 ok, -1 with err. */
int sq_spawn_detached(const char *path, char *const argv[], char *const envp[],
		      const struct sq_cred *cred, const int *pass_fds, int npass,
		      struct sq_child *child, char *err, size_t errlen);

/* Run to completion. 0 when it ran (whatever its exit status, in *status). */
int sq_run(const char *path, char *const argv[], char *const envp[], const struct sq_cred *cred,
	   int *status, struct sq_child *child, char *err, size_t errlen);

/* What sq_run_opts adds to sq_run, applied in the child once it has become cred; and
 * tick, called about every second while the caller waits for it (its captured stderr,
 * so far: a long run's progress lines can be passed on as they come). */
struct sq_spawn_opts {
	const char *dir;       /* its working directory (NULL: the caller's) */
	int umask;             /* its umask (-1: the caller's) */
	const int *pass_fds;   /* become its descriptors 3, 4, ... (at most 8) */
	int npass;
	void (*tick)(int err_fd, void *arg);   /* NULL: none */
	void *tick_arg;
	/* NULL, or a cgroup.procs file the child joins (as root, before it becomes cred), so
	 * that it ends with the step that started it (core/stepcg.h) */
	const char *cgroup_procs;
};

/* sq_run with o (NULL: as sq_run). A cred with groups set when the caller runs with a
 * dropped effective id and root's real one (slurmstepd's user_init) makes the child take
 * root back first, then become cred: how the plugin runs the image builder. */
int sq_run_opts(const char *path, char *const argv[], char *const envp[],
		const struct sq_cred *cred, const struct sq_spawn_opts *o, int *status,
		struct sq_child *child, char *err, size_t errlen);

/* Root's effective id in the calling thread alone, where the process runs with a dropped
 * effective id and root's real or saved one (slurmstepd's user_init): for what the user may
 * not do (read slurmstepd's /proc/self/fd, kill the builder). Returns the id to go back to
 * with sq_thread_back, or (uid_t)-1 when nothing was changed. */
uid_t sq_thread_root(void);
void sq_thread_back(uid_t e);

/* What a watched run asks once a second while its child runs: 1 when what the child works
 * for has gone (srunwatch.h). */
struct sq_watch {
	int (*gone)(void *arg);
	void *arg;
	int stopped;      /* set when the child was stopped because gone said so */
};

/* sq_run_opts with the child in a process group of its own, which is killed (SIGKILL)
 * once w->gone says so; the wait goes on until it has exited, and w->stopped says it was
 * stopped. */
int sq_run_watched(const char *path, char *const argv[], char *const envp[],
		   const struct sq_cred *cred, const struct sq_spawn_opts *o,
		   struct sq_watch *w, int *status, struct sq_child *child, char *err,
		   size_t errlen);

/* The last n non-empty lines of a captured stream joined with " | ", control bytes
 * replaced, into buf ("" when empty). */
void sq_capture_tail(int fd, int n, char *buf, size_t buflen);
/* The whole capture as a heap string (NULL when empty or on error). */
char *sq_capture_read(int fd);

/* err = "WHAT failed (WHY): " + the runtime's last lines (stderr, else stdout), so a
 * failed enroot call always reads the same way on srun's stderr. */
void sq_child_failure(const struct sq_child *child, const char *what, const char *why,
		      char *err, size_t errlen);

/* "exit status 3" / "killed by signal 9" */
void sq_status_text(int status, char *buf, size_t buflen);

#endif
