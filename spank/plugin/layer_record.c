/* layer_record.c: see layer_record.h. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

#include "layer_record.h"
#include "safeopen.h"
#include "smallio.h"

static void layer_path(char *buf, size_t len, const char *dir, uint32_t jobid, uint32_t stepid)
{
	snprintf(buf, len, "%s/" SQ_LAYER_RECORD_PREFIX "%u.%u", dir, (unsigned)jobid, (unsigned)stepid);
}

/* A named container's: its runtime name starts with "pyxis_", a step's with a digit. */
static void named_layer_path(char *buf, size_t len, const char *dir, const char *name)
{
	snprintf(buf, len, "%s/" SQ_LAYER_RECORD_PREFIX "%s", dir, name);
}

/* Written as the plugin's other records are (temporary, then renamed): a reader never
 * sees half a line, and a link planted at the name is replaced, never followed. */
static int write_layer(const char *path, unsigned long long dev, unsigned long long ino)
{
	char line[64];

	snprintf(line, sizeof(line), "%llu %llu\n", dev, ino);
	return sq_write_record(path, line);
}

static int read_layer_file(const char *path, unsigned long long *dev, unsigned long long *ino)
{
	char line[64] = "";
	ssize_t n;
	int fd;

	fd = sq_open_regular(AT_FDCWD, path, SQ_OPEN_NOFOLLOW, NULL);
	if (fd < 0)
		return -1;
	n = read(fd, line, sizeof(line) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	line[n] = '\0';
	return sscanf(line, "%llu %llu", dev, ino) == 2 ? 0 : -1;
}

int sq_layer_record(const char *dir, uint32_t jobid, uint32_t stepid, unsigned long long dev,
		    unsigned long long ino)
{
	char path[PATH_MAX];

	layer_path(path, sizeof(path), dir, jobid, stepid);
	return write_layer(path, dev, ino);
}

int sq_layer_read(const char *dir, uint32_t jobid, uint32_t stepid, unsigned long long *dev,
		  unsigned long long *ino)
{
	char path[PATH_MAX];

	layer_path(path, sizeof(path), dir, jobid, stepid);
	return read_layer_file(path, dev, ino);
}

void sq_layer_forget(const char *dir, uint32_t jobid, uint32_t stepid)
{
	char path[PATH_MAX];

	layer_path(path, sizeof(path), dir, jobid, stepid);
	unlink(path);
}

int sq_layer_record_named(const char *dir, const char *name, unsigned long long dev,
			  unsigned long long ino)
{
	char path[PATH_MAX];

	named_layer_path(path, sizeof(path), dir, name);
	return write_layer(path, dev, ino);
}

int sq_layer_read_named(const char *dir, const char *name, unsigned long long *dev,
			unsigned long long *ino)
{
	char path[PATH_MAX];

	named_layer_path(path, sizeof(path), dir, name);
	return read_layer_file(path, dev, ino);
}

void sq_layer_forget_named(const char *dir, const char *name)
{
	char path[PATH_MAX];

	named_layer_path(path, sizeof(path), dir, name);
	unlink(path);
}
