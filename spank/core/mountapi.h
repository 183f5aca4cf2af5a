/*
 * mountapi.h: Linux 5.2's mount API (open_tree, move_mount), called through syscall() so
 * that older C libraries build it; the plugin needs Linux 5.3.
 */
#ifndef SQUALL_MOUNTAPI_H
#define SQUALL_MOUNTAPI_H

#include <fcntl.h>
#include <sys/syscall.h>

#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif

#endif
