/*
 * procstat.h: know a process again later, by its PID *and* its start time.
 *
 * A PID alone can be reused once the process is gone; the pair (PID, start time in
 * clock ticks since boot, field 22 of /proc/PID/stat) cannot, until a reboot. squall
 * writes that pair in the record of a running named container, so that a later step
 * joins the very process that was started, or nothing.
 */
#ifndef SQUALL_CORE_PROCSTAT_H
#define SQUALL_CORE_PROCSTAT_H

#include <stddef.h>
#include <sys/types.h>

/* Parse the text of /proc/PID/stat. The command name (field 2) is in parentheses and
 * may hold anything, ')' and spaces included, so fields are counted from the last ')'.
 * 0 ok (*state: 'R', 'S', 'T', ...; *starttime: field 22), -1 malformed. */
int sq_procstat_parse(const char *text, size_t len, char *state, unsigned long long *starttime);

/* Read /proc/PID/stat into buf, once, unterminated (len bytes at most; 1024 hold it). The
 * bytes read; -1 when the process is gone (or unreadable). */
ssize_t sq_procstat_text(long pid, char *buf, size_t len);

/* Read and parse /proc/PID/stat. 0 ok, -1 when the process is gone (or unreadable). */
int sq_procstat_read(long pid, char *state, unsigned long long *starttime);

/* The record of a running named container: one line "squall-running 1 PID STARTTIME\n".
 * format: 0 ok, -1 when out is too small. parse: 0 ok, -1 malformed (PID not in
 * 1..INT_MAX, start time missing, trailing bytes). */
int sq_running_format(long pid, unsigned long long starttime, char *out, size_t outlen);
int sq_running_parse(const char *text, size_t len, long *pid, unsigned long long *starttime);

/* The same record for a container with namespaces of its own (--container-unshare): the
 * process that holds them follows, "squall-running 1 PID START NSPID NSSTART\n".
 * format: nspid 0 writes the plain record. parse: a plain record gives *nspid = 0 and
 * *nsstart = 0; NSPID must be in 1..INT_MAX. */
int sq_running_format_ns(long pid, unsigned long long starttime, long nspid,
			 unsigned long long nsstart, char *out, size_t outlen);
int sq_running_parse_ns(const char *text, size_t len, long *pid, unsigned long long *starttime,
			long *nspid, unsigned long long *nsstart);

#endif
