/* records.c: see records.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "layer_record.h"
#include "pidfd.h"
#include "procstat.h"
#include "reap.h"
#include "records.h"
#include "safeopen.h"
#include "smallio.h"
#include "strbuf.h"

#define RECORD_PREFIX "keeper-"

static void record_path(char *buf, size_t len, const char *dir, uint32_t jobid,
			const char *what)
{
	snprintf(buf, len, "%s/" RECORD_PREFIX "%u.%s", dir, (unsigned)jobid, what);
}

int sq_record_keeper(const char *dir, uint32_t jobid, const char *what, pid_t pid,
		     unsigned long long starttime, char *err, size_t errlen)
{
	char path[PATH_MAX], line[96];

	if (sq_running_format((long)pid, starttime, line, sizeof(line)) < 0)
		return sq_errf(err, errlen, "cannot format the keeper record");
	record_path(path, sizeof(path), dir, jobid, what);
	if (sq_write_record(path, line) == 0)
		return 0;
	return sq_errf(err, errlen, "cannot record the container's keeper in %s: %s", dir,
		       strerror(errno));
}

void sq_record_forget(const char *dir, uint32_t jobid, const char *what)
{
	char path[PATH_MAX];

	record_path(path, sizeof(path), dir, jobid, what);
	unlink(path);
}

/* The namespaces one sweep holds (sq_mntns_pin): a container's, its layers'. */
#define MAX_PINS 16
#define MAX_LAYERS 64

/* The numbers of the mount namespaces of the job's layer records (layer_record.h): those
 * of steps whose slurmstepd died (a step that ends removes its own). */
struct layer_ids {
	unsigned long long dev[MAX_LAYERS], ino[MAX_LAYERS];
	int n;
};

/* One layer record, the user's file: read only when it is a regular file. */
static void read_layer(int dirfd_, const char *name, struct layer_ids *l)
{
	char buf[64];

	if (l->n >= MAX_LAYERS ||
	    sq_read_text(sq_open_regular(dirfd_, name, SQ_OPEN_NOFOLLOW, NULL), buf,
			 sizeof(buf)) <= 0)
		return;
	if (sscanf(buf, "%llu %llu", &l->dev[l->n], &l->ino[l->n]) == 2)
		l->n++;
}

/*
 * The layers of l made on the container whose namespaces are pins[0..n), appended, pinned.
 * A layer record is only a number: once the layer's last task is gone its namespace is
 * freed, and the number goes at once to the next namespace made on the node, as likely as
 * not the user's next container. So a number is used only to find a namespace that is
 * still owned by the container's user namespace (squall-layer makes a layer there), which
 * the sweep holds through the container's own namespace; a layer with no task left is
 * nothing to end. Returns the new count.
 */
static int pin_layers(int *pins, int n, const struct layer_ids *l, uid_t uid)
{
	int owners = n;

	for (int i = 0; i < l->n && n < MAX_PINS; i++)
		for (int j = 0; j < owners; j++) {
			int fd = sq_mntns_pin_owned(l->dev[i], l->ino[i], (long)uid, pins[j]);
			if (fd >= 0) {
				pins[n++] = fd;
				break;
			}
		}
	return n;
}

/* The container's namespaces and its layers', held while a member of the keeper's session
 * shows them (sq_session_mntns: verified through pidfds). */
static int pin_container(long sid, uid_t uid, const struct layer_ids *l, int *pins)
{
	int n = sq_session_mntns(sid, (long)uid, pins, 4);

	return pin_layers(pins, n, l, uid);
}

/* End the container of one record, as root: the keeper if it is still the recorded process
 * and uid's, then every process of uid in its session and in the namespaces the sweep
 * holds. 1 when something ran. The record is the user's file: read only when it is a
 * regular file (a FIFO would block the epilog). */
static int sweep_record(int dirfd_, const char *name, uid_t uid, const struct layer_ids *l)
{
	char buf[128], state;
	unsigned long long recorded, start;
	long pid;
	ssize_t n;
	int fd, ran = 0, pidfd, pins[MAX_PINS], npins = 0;

	fd = sq_open_regular(dirfd_, name, SQ_OPEN_NOFOLLOW, NULL);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n <= 0 || sq_running_parse(buf, (size_t)n, &pid, &recorded) < 0)
		return 0;
	pidfd = sq_pidfd_open((pid_t)pid);
	if (pidfd >= 0) {
		if (sq_procstat_read(pid, &state, &start) != 0 || start != recorded ||
		    !sq_proc_owned_by(pid, (long)uid)) {
			/* Another process took the number: the session (if any) is not ours. */
			close(pidfd);
			return 0;
		}
		/* Held before the keeper goes: its runtime then exits and frees the container's
		 * namespaces, whose numbers go at once to the next ones made, the next job's
		 * `enroot start` on this node among them (issue 30). Held, they stay the
		 * container's for the whole sweep. */
		npins = pin_container(pid, uid, l, pins);
		sq_pidfd_signal(pidfd, SIGKILL);
		sq_pidfd_wait_exit(pidfd, 2000);
		ran = 1;
		close(pidfd);
	}
	/* The session id stays allocated while a member lives: what has it is the container's,
	 * and so is what runs in the container's mount namespaces (tasks of a dead step). */
	if (npins == 0)
		npins = pin_container(pid, uid, l, pins);
	for (int round = 0; round < 100; round++) {
		int k = sq_reap_session(pid, (long)uid, -1);
		for (int i = 0; i < npins; i++) {
			int r = sq_reap_mntns(pins[i], (long)uid, -1);
			k += r > 0 ? r : 0;
		}
		if (k <= 0)
			break;
		ran = 1;
		usleep(20000);
	}
	for (int i = 0; i < npins; i++)
		close(pins[i]);
	return ran;
}

int sq_records_sweep_job(int dirfd_, uint32_t jobid, uid_t uid)
{
	char prefix[64], layer[64], kept[64];
	struct layer_ids layers = { .n = 0 };
	struct dirent *e;
	int running = 0;
	DIR *d = sq_dir_stream(dirfd_);

	if (d == NULL)
		return 0;
	snprintf(prefix, sizeof(prefix), RECORD_PREFIX "%u.", (unsigned)jobid);
	snprintf(layer, sizeof(layer), SQ_LAYER_RECORD_PREFIX "%u.", (unsigned)jobid);
	snprintf(kept, sizeof(kept), "kept-%u-", (unsigned)jobid);
	/* The layers of dead steps, ended with the container they were made on. */
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, layer, strlen(layer)) == 0)
			read_layer(dirfd(d), e->d_name, &layers);
	rewinddir(d);
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		if (strstr(e->d_name, ".tmp") == NULL)
			running += sweep_record(dirfd_, e->d_name, uid, &layers);
		unlinkat(dirfd_, e->d_name, 0);
	}
	/* Then the layer records and the sockets and locks of the job's kept containers. */
	rewinddir(d);
	while ((e = readdir(d)) != NULL) {
		if ((strncmp(e->d_name, layer, strlen(layer)) == 0 ||
		     strncmp(e->d_name, kept, strlen(kept)) == 0) &&
		    unlinkat(dirfd(d), e->d_name, 0) < 0 &&
		    unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) < 0) {
			/* gone already (a data directory is empty outside its keeper) */
		}
	}
	closedir(d);
	return running;
}
