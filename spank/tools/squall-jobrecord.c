/*
 * squall-jobrecord JOBID ENTRY: add ENTRY to job JOBID's AdminComment in Slurm, once.
 *
 * The plugin starts it, detached and as root, on the first node of every container step
 * (plugin/jobrecord.c), so that accounting keeps the image each job ran (docs/admin.md).
 * The comment is read, ENTRY appended after whatever the site or an earlier step wrote
 * there (space separated; nothing already there is changed), and read again: two steps of
 * one job updating at once would lose one entry, so a missing entry is written again, a
 * few times. A job that ended before this program got to it (a short job: it runs
 * detached, nobody waits for it) is no longer the controller's to change; its record is
 * then changed in the accounting database, with `sacctmgr modify job`, as an admin would.
 * Failures go to syslog: nobody waits for this program.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#define TRIES 5

/* 1 when text holds entry as a whole space-separated word. */
static int has_entry(const char *text, const char *entry)
{
	size_t n = strlen(entry);

	for (const char *p = text; p != NULL && (p = strstr(p, entry)) != NULL; p += n) {
		int starts = p == text || p[-1] == ' ';
		int ends = p[n] == '\0' || p[n] == ' ';
		if (starts && ends)
			return 1;
	}
	return 0;
}

/* The job's admin comment now ("" when none) in *out (heap). 0 ok, -1 said. */
static int read_comment(uint32_t jobid, char **out)
{
	job_info_msg_t *msg = NULL;
	const char *cur = "";

	if (slurm_load_job(&msg, jobid, SHOW_ALL) != SLURM_SUCCESS) {
		syslog(LOG_WARNING, "job %u: cannot read the job: %s", jobid,
		       slurm_strerror(errno));
		return -1;
	}
	for (uint32_t i = 0; i < msg->record_count; i++)
		if (msg->job_array[i].job_id == jobid && msg->job_array[i].admin_comment != NULL)
			cur = msg->job_array[i].admin_comment;
	*out = strdup(cur);
	slurm_free_job_info_msg(msg);
	return *out != NULL ? 0 : -1;
}

/* sacctmgr -i modify job where jobid=JOBID set AdminComment=TEXT (fork and exec, no
 * shell: TEXT is one word of argv whatever it holds). 0 ok, -1 said. */
static int write_accounting(uint32_t jobid, const char *text)
{
	char where[32], *set = NULL;
	int status = 0;
	pid_t pid;

	snprintf(where, sizeof(where), "jobid=%u", jobid);
	if (asprintf(&set, "AdminComment=%s", text) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		char *argv[] = { "sacctmgr", "-i", "modify", "job", "where", where, "set", set,
				 NULL };
		int devnull = open("/dev/null", O_RDWR);

		if (devnull >= 0) {
			dup2(devnull, STDIN_FILENO);
			dup2(devnull, STDOUT_FILENO);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	free(set);
	while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		syslog(LOG_WARNING, "job %u: ended, and sacctmgr could not update its "
		       "AdminComment in accounting (status %d)", jobid, status);
		return -1;
	}
	return 1;
}

/* 0 written, 1 written to accounting (the job had ended: the controller's copy stays as
 * it was), -1 said. */
static int write_comment(uint32_t jobid, char *text)
{
	job_desc_msg_t desc;

	slurm_init_job_desc_msg(&desc);
	desc.job_id = jobid;
	desc.admin_comment = text;
	if (slurm_update_job(&desc) != SLURM_SUCCESS) {
		if (errno == ESLURM_JOB_FINISHED || errno == ESLURM_ALREADY_DONE)
			return write_accounting(jobid, text);
		syslog(LOG_WARNING, "job %u: cannot update its AdminComment: %s", jobid,
		       slurm_strerror(errno));
		return -1;
	}
	return 0;
}

/* A short random pause, so that two racing writers do not meet again. */
static void pause_a_little(void)
{
	struct timespec ts = { 0, (50 + rand() % 200) * 1000000L };

	nanosleep(&ts, NULL);
}

static int record(uint32_t jobid, const char *entry)
{
	for (int i = 0; i < TRIES; i++) {
		char *cur = NULL, *next;
		size_t n;
		int rc;

		if (read_comment(jobid, &cur) < 0)
			return -1;
		if (has_entry(cur, entry)) {
			free(cur);
			return 0;
		}
		n = strlen(cur) + strlen(entry) + 2;
		next = malloc(n);
		if (next == NULL) {
			free(cur);
			return -1;
		}
		snprintf(next, n, "%s%s%s", cur, cur[0] ? " " : "", entry);
		free(cur);
		rc = write_comment(jobid, next);
		free(next);
		if (rc != 0)
			return rc < 0 ? -1 : 0;
		pause_a_little();
	}
	syslog(LOG_WARNING, "job %u: %s was not kept in its AdminComment after %d tries",
	       jobid, entry, TRIES);
	return -1;
}

int main(int argc, char **argv)
{
	char *end = NULL;
	unsigned long jobid;
	int rc;

	openlog("squall-jobrecord", LOG_PID, LOG_DAEMON);
	if (argc != 3 || argv[2][0] == '\0' || strchr(argv[2], ' ') != NULL) {
		fprintf(stderr, "usage: squall-jobrecord JOBID ENTRY (ENTRY without spaces)\n");
		return 2;
	}
	errno = 0;
	jobid = strtoul(argv[1], &end, 10);
	if (errno != 0 || end == argv[1] || *end != '\0' || jobid == 0 || jobid > 0xfffffff0UL) {
		fprintf(stderr, "squall-jobrecord: '%s' is not a job id\n", argv[1]);
		return 2;
	}
	srand((unsigned)time(NULL) ^ (unsigned)jobid);
	slurm_init(NULL);
	rc = record((uint32_t)jobid, argv[2]) == 0 ? 0 : 1;
	slurm_fini();
	return rc;
}
