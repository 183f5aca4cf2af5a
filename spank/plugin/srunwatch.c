/* srunwatch.c: see srunwatch.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runcmd.h"
#include "smallio.h"
#include "srunwatch.h"
#include "tcpstate.h"

/* The state of the socket `inode` in tcp or tcp6 (-1: in neither). */
static int state_of(const char *tcp, const char *tcp6, unsigned long inode)
{
	int st = tcp ? sq_tcp_state(tcp, inode) : -1;

	return st >= 0 || tcp6 == NULL ? st : sq_tcp_state(tcp6, inode);
}

/* The inodes of the sockets among this process's descriptors that are ESTABLISHED. */
static void scan(struct sq_srun_watch *w, const char *tcp, const char *tcp6)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	while (d != NULL && (e = readdir(d)) != NULL && w->n < SQ_SRUN_WATCH_MAX) {
		char path[300], link[64];
		unsigned long inode;
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		if (len <= 0)
			continue;
		link[len] = '\0';
		if (sscanf(link, "socket:[%lu]", &inode) == 1 &&
		    state_of(tcp, tcp6, inode) == SQ_TCP_ESTABLISHED)
			w->inodes[w->n++] = inode;
	}
	if (d != NULL)
		closedir(d);
}

void sq_srun_watch_init(struct sq_srun_watch *w)
{
	char *tcp = sq_read_file("/proc/self/net/tcp", NULL);
	char *tcp6 = sq_read_file("/proc/self/net/tcp6", NULL);
	uid_t back = sq_thread_root();

	w->n = 0;
	scan(w, tcp, tcp6);
	sq_thread_back(back);
	free(tcp);
	free(tcp6);
}

int sq_srun_gone(void *arg)
{
	struct sq_srun_watch *w = arg;
	char *tcp, *tcp6;
	int closed = 0, open = 0;

	if (w == NULL || w->n == 0)
		return 0;  /* nothing watched: never a reason to stop a build */
	tcp = sq_read_file("/proc/self/net/tcp", NULL);
	tcp6 = sq_read_file("/proc/self/net/tcp6", NULL);
	if (tcp == NULL && tcp6 == NULL)
		return 0;  /* nothing known: never a reason to stop a build */
	/* srun closed its end: CLOSE_WAIT, or already closed by slurmstepd's I/O thread too,
	 * when the socket is in neither table any more */
	for (int i = 0; i < w->n; i++) {
		int st = state_of(tcp, tcp6, w->inodes[i]);
		closed += st == SQ_TCP_CLOSE_WAIT || st < 0;
		open += st >= 0 && st != SQ_TCP_CLOSE_WAIT;
	}
	free(tcp);
	free(tcp6);
	return closed > 0 && open == 0;
}
