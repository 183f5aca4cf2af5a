/* tcpstate.c: see tcpstate.h. */
#include <stdio.h>
#include <string.h>

#include "tcpstate.h"

int sq_tcp_state(const char *text, unsigned long inode)
{
	const char *line = text;

	while (line != NULL && *line) {
		const char *next = strchr(line, '\n');
		unsigned long ino;
		unsigned int st;
		/* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
		if (sscanf(line, " %*s %*s %*s %x %*s %*s %*s %*s %*s %lu", &st, &ino) == 2 &&
		    ino == inode)
			return (int)st;
		line = next ? next + 1 : NULL;
	}
	return -1;
}
