/*
 * protocol.h: the descriptors and messages between the plugin (slurmstepd), squall-keeper
 * and squall-layer, in one place: here in the core's directory, which all three include
 * from (spank/plugin/, spank/keeper/, spank/hooks/). Both helpers are started by sq_spawn_detached
 * (runcmd.h), which places the descriptors it is given at SQ_FD_PASSED and up, in order.
 *
 * A step's container, under its keeper (plugin/keeper_client.c; keeper/squall-keeper.c):
 *   squall-keeper [--job SOCKET IDLE_S] [--use-cache ...|--fill-cache ...] RUNTIME ARGS...
 *   fd KEEPER_FD_CONTROL  a SOCK_SEQPACKET socket to the plugin:
 *     keeper -> plugin  "started KPID PID" + pidfds of the keeper and of the runtime
 *                       "ready"            the runtime's first process stopped itself
 *                       "exited STATUS"    it exited instead (waitpid status)
 *     plugin -> keeper  "stop"             end the container (step end, save, failure)
 *   fd KEEPER_FD_STEPD    a pidfd of that slurmstepd (absent with --job): when it becomes
 *                         readable, slurmstepd is gone and the container ends with its
 *                         tasks
 *
 * A container kept for the job (--job SOCKET IDLE_S; kept.h, kept.c): steps connect to
 * SOCKET, as the starting step talks on its control socket:
 *     step -> keeper    "attach"           answered "attached KPID PID" + pidfds of both,
 *                                          once the runtime is ready
 *                       "layer DEV INO"    + a descriptor of the mount namespace of the
 *                                          step's layer, which the keeper holds (so the
 *                                          number cannot go to another namespace): its
 *                                          processes end with the step if its slurmstepd
 *                                          dies without "bye"; without the descriptor the
 *                                          message is ignored
 *                       "bye"              the step leaves; the container goes on
 *   The keeper ends the container after IDLE_S seconds with no step, or when killed (the
 *   job epilog).
 *
 * A step's layer on the kept container (plugin/layer.c sq_layer_make; hooks/squall-layer.c):
 *   squall-layer --pid PID [--renew MAJ:MIN]...
 *   fd LAYER_FD_USERNS   the container's user namespace
 *   fd LAYER_FD_MNTNS    its mount namespace
 *   fd LAYER_FD_READY    write end of a pipe: "ready PID\n" once the layer is built (PID:
 *                        the helper, which holds the layer's mount namespace)
 *   fd LAYER_FD_RELEASE  read end of a pipe: the plugin closes it once it holds the layer,
 *                        and the helper exits
 *
 * Only #defines here: squall-layer is built alone, without the core or the plugin.
 */
#ifndef SQUALL_CORE_PROTOCOL_H
#define SQUALL_CORE_PROTOCOL_H

/* The first descriptor a helper is handed (sq_spawn_detached: pass_fds[i] is 3 + i). */
#define SQ_FD_PASSED 3

#define KEEPER_FD_CONTROL 3
#define KEEPER_FD_STEPD 4
#define KEEPER_MSG_STARTED "started"
#define KEEPER_MSG_READY "ready"
#define KEEPER_MSG_EXITED "exited"
#define KEEPER_MSG_STOP "stop"
#define KEEPER_MSG_ATTACH "attach"
#define KEEPER_MSG_ATTACHED "attached"
#define KEEPER_MSG_LAYER "layer"
#define KEEPER_MSG_BYE "bye"

#define LAYER_FD_USERNS 3
#define LAYER_FD_MNTNS 4
#define LAYER_FD_READY 5
#define LAYER_FD_RELEASE 6
#define LAYER_FD_COUNT 4
#define LAYER_MSG_READY "ready"

#endif
