/*
 * unshare.h: --container-unshare=NS[,NS...] (Pyxis 0.24): the namespaces a container gets
 * of its own instead of sharing the node's. Kinds: net, ipc, uts. Pure parsing.
 *
 * Value: one or more kinds separated by ','; the same kind twice is fine; an empty entry or
 * an unknown kind is an error naming it. The canonical text lists the kinds in the order
 * net, ipc, uts ("same value twice" compares it).
 */
#ifndef SQUALL_CORE_UNSHARE_H
#define SQUALL_CORE_UNSHARE_H

#include <stddef.h>

enum sq_ns_kind {
	SQ_NS_NET = 1,
	SQ_NS_IPC = 2,
	SQ_NS_UTS = 4
};
#define SQ_NS_ALL (SQ_NS_NET | SQ_NS_IPC | SQ_NS_UTS)

/* Parse text into *mask (SQ_NS_* bits, never 0 on success). 0 ok, -1 error. */
int sq_unshare_parse(const char *text, int *mask, char *err, size_t errlen);

/* "net,ipc,uts" (the kinds in mask, canonical order) into buf; "" for 0. Returns buf. */
const char *sq_unshare_str(int mask, char *buf, size_t buflen);

/* /proc/PID/ns/ name of one kind ("net", "ipc", "uts"); NULL for anything else. */
const char *sq_ns_name(int kind);

#endif
