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

int sq_tcp_peer_v4(const char *text, unsigned long inode, unsigned int *ip)
{
	const char *line = text;

	while (line != NULL && *line) {
		const char *next = strchr(line, '\n');
		char rem[64];
		unsigned long ino;
		size_t n;

		if (sscanf(line, " %*s %*s %63s %*s %*s %*s %*s %*s %*s %lu", rem, &ino) == 2 &&
		    ino == inode) {
			n = strcspn(rem, ":");
			if (n == 8)
				return sscanf(rem, "%8x", ip) == 1 ? 0 : -1;
			/* ::ffff:a.b.c.d: 0000000000000000FFFF0000 then the IPv4 word */
			if (n == 32 && strncmp(rem, "0000000000000000FFFF0000", 24) == 0)
				return sscanf(rem + 24, "%8x", ip) == 1 ? 0 : -1;
			return -1;
		}
		line = next ? next + 1 : NULL;
	}
	return -1;
}
