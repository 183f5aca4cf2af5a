/* governor.c: see governor.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "governor.h"
#include "nodecache.h"
#include "smallio.h"

#define IOPRIO_CLASS_IDLE 3
#define IOPRIO_WHO_PROCESS 1

struct gov_sample {
	unsigned long long now_us, busy_us, own_us;
	long long io_us;
};

static unsigned long long mono_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (unsigned long long)t.tv_sec * 1000000ULL + (unsigned long long)t.tv_nsec / 1000;
}

/* The start of a /proc file, NUL-terminated, or "" (never blocks: /proc). */
static void read_proc(const char *path, char *buf, size_t len)
{
	sq_read_text(open(path, O_RDONLY | O_CLOEXEC), buf, len);
}

static void sample(pid_t pid, struct gov_sample *g)
{
	char buf[1024], path[64];
	unsigned long long v[8] = { 0 }, ut = 0, st = 0;
	long tick = sysconf(_SC_CLK_TCK);
	const char *p;

	if (tick <= 0)
		tick = 100;
	g->now_us = mono_us();
	read_proc("/proc/stat", buf, sizeof(buf));
	/* cpu user nice system idle iowait irq softirq steal */
	if (sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
		   &v[3], &v[4], &v[5], &v[6], &v[7]) == 8)
		g->busy_us = (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) * 1000000ULL /
			     (unsigned long long)tick;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	read_proc(path, buf, sizeof(buf));
	/* after "(comm)": state ppid pgrp session tty tpgid flags minflt cminflt majflt
	 * cmajflt utime stime */
	p = strrchr(buf, ')');
	if (p != NULL && sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
				&ut, &st) == 2)
		g->own_us = (ut + st) * 1000000ULL / (unsigned long long)tick;
	read_proc("/proc/pressure/io", buf, sizeof(buf));
	p = strstr(buf, "total=");
	g->io_us = p != NULL ? strtoll(p + 6, NULL, 10) : -1;
}

/* Sleep ms unless the child exits first: 1 exited (*status set), 0 not. */
static int nap_or_exit(pid_t pid, long ms, int *status)
{
	unsigned long long until = mono_us() + (unsigned long long)ms * 1000ULL;

	for (;;) {
		unsigned long long now = mono_us();
		long left = now >= until ? 0 : (long)((until - now) / 1000);
		struct timespec t = { 0, (left < 10 ? left : 10) * 1000000L };
		pid_t r = waitpid(pid, status, WNOHANG);

		if (r == pid || (r < 0 && errno != EINTR))
			return 1;
		if (left <= 0)
			return 0;
		nanosleep(&t, NULL);
	}
}

int sq_run_governed(char *const argv[], int out_fd)
{
	int duty = SQ_YIELD_START;

	return sq_run_governed_at(argv, out_fd, &duty);
}

int sq_run_governed_at(char *const argv[], int out_fd, int *duty_io)
{
	struct gov_sample a, b;
	int status = -1, duty = *duty_io, stopped = 0;
	pid_t parent = getpid(), pid = fork();

	if (duty < SQ_YIELD_FLOOR || duty > SQ_YIELD_FULL)
		duty = SQ_YIELD_START;
	if (pid < 0)
		return -1;
	if (pid == 0) {
		struct sched_param none = { 0 };
		int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);

		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		if (devnull >= 0) {
			dup2(devnull, 0);
			dup2(out_fd >= 0 ? out_fd : devnull, 1);
		}
		setpriority(PRIO_PROCESS, 0, 19);
		syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_CLASS_IDLE << 13);
		sched_setscheduler(0, SCHED_IDLE, &none);
		execv(argv[0], argv);
		_exit(127);
	}
	setpgid(pid, pid);
	sample(pid, &a);
	for (;;) {
		long run_ms = SQ_YIELD_PERIOD_MS * duty / SQ_YIELD_FULL;
		struct sq_yield_obs o;

		if (stopped) {
			kill(-pid, SIGCONT);
			stopped = 0;
		}
		if (nap_or_exit(pid, run_ms, &status))
			break;
		if (duty < SQ_YIELD_FULL) {
			kill(-pid, SIGSTOP);
			stopped = 1;
			if (nap_or_exit(pid, SQ_YIELD_PERIOD_MS - run_ms, &status))
				break;
		}
		sample(pid, &b);
		o.window_us = b.now_us - a.now_us;
		o.busy_us = b.busy_us > a.busy_us ? b.busy_us - a.busy_us : 0;
		o.own_us = b.own_us > a.own_us ? b.own_us - a.own_us : 0;
		o.io_stall_us = a.io_us >= 0 && b.io_us >= a.io_us ? b.io_us - a.io_us : -1;
		duty = sq_yield_next(duty, &o);
		a = b;
	}
	*duty_io = duty;
	return status;
}
