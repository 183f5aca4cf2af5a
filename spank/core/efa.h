/*
 * efa.h: EFA detection on a node, the image's own EFA libraries, and the plan
 * (variables + mounts + warnings, or the one-line refusal) for a step.
 *
 * Flow in the plugin (see docs/efa.md):
 *  1. Before the container starts: sq_efa_detect() with the plugstack roots, then
 *     sq_efa_plan(&node, NULL, &req, ...) -- the host-level plan. A non-zero return
 *     is the one-line refusal for `require` (no EFA device, memlock below 16 GiB):
 *     print it to srun and do not start the container. Print plan.warnings (memlock
 *     below 16 GiB on an EFA node, ...) on stderr once per step, verbatim. Put
 *     plan.env in the conf file's environ() whatever plan.active says: it holds what
 *     must be set before Enroot's hooks.d run (MELLANOX_VISIBLE_DEVICES=void) and the
 *     --container-nccl-debug variables, which are wanted on any node. plan.fstab is
 *     empty at this level. memlock is checked only here (the hook does not repeat
 *     it), so call it where getrlimit gives the task's limit or set node.memlock.
 *     When plan.active is 0 (auto with no EFA, or off) no hook is needed.
 *  2. When plan.active is 1: the conf file's hooks() runs, inside the container's
 *     namespaces,  squall-efa-hook ARGS  with argv built by sq_efa_hook_argv()
 *     (never a shell string). The hook detects again, lists the image under
 *     $ENROOT_ROOTFS (sq_efa_image_scan), calls sq_efa_plan with the image, and
 *     appends plan.env to $ENROOT_ENVIRON and plan.fstab to $ENROOT_MOUNTS; in
 *     `require` with no libraries in image nor host it exits 1 with the line on
 *     stderr, which aborts the start.
 *
 * sq_efa_plan is a pure function of its inputs: tests build nodes and images by
 * hand or detect them from prepared directory trees.
 *
 * A variable named in req.user_set is never emitted: what the user set wins.
 * Never emitted by default: FI_PROVIDER, FI_EFA_USE_DEVICE_RDMA, FI_EFA_FORK_SAFE,
 * RDMAV_FORK_SAFE, NCCL_BUFFSIZE, NCCL_P2P_NET_CHUNKSIZE, NCCL_TUNER_PLUGIN,
 * NCCL_TOPO_FILE (obsolete, harmful on g5/g6, or set by the plugin itself).
 */
#ifndef SQUALL_CORE_EFA_H
#define SQUALL_CORE_EFA_H

#include <stddef.h>

/* 16 GiB: below this on an EFA node, warn (auto) or refuse (require). */
#define SQ_EFA_MEMLOCK_MIN (16LL << 30)
#define SQ_EFA_PATH_LEN 512

/* Where detection looks; NULL or "" means the real path. */
struct sq_efa_roots {
	const char *sysfs;       /* default "/sys" */
	const char *dev;         /* default "/dev" */
	const char *opt;         /* default "/opt/amazon" */
};

/* One library found (host or image). Empty `dir` means not found. */
struct sq_efa_lib {
	char prefix[SQ_EFA_PATH_LEN]; /* install prefix, e.g. /opt/amazon/efa (host: under the opt
	                                 root; image: the path inside the image, not ENROOT_ROOTFS) */
	char dir[SQ_EFA_PATH_LEN];    /* directory holding the library, e.g. /opt/amazon/efa/lib */
	char file[128];               /* file name, e.g. libfabric.so.1 or libnccl-net-ofi.so */
	char plugin_suffix[64];       /* aws-ofi-nccl only: X of libnccl-net-X.so ("" when the
	                                 only file is libnccl-net.so): the NCCL_NET_PLUGIN value */
	char net_name[32];            /* aws-ofi-nccl only: "Libfabric" or "AWS Libfabric" as found
	                                 in the library (the NCCL_NET value); "" if unknown */
};

/* What detection found on the node. */
struct sq_efa_node {
	char instance_type[64];  /* <sysfs>/devices/virtual/dmi/id/product_name, "" unknown */
	int n_devices;           /* <sysfs>/class/infiniband/X whose device/driver is "efa" */
	char first_device[64];   /* name of the first such X (sorted), "" none */
	int n_uverbs;            /* <dev>/infiniband/uverbs* entries */
	/* From the profile table (efa_profiles.def); -1 / 0 when the type is not listed. */
	int profile_known;       /* 1 when instance_type is in the table */
	int profile_max_efa;     /* EFA interfaces the type has */
	int profile_gdr;         /* 1 GPUDirect RDMA, 0 none (send/recv only), -1 n/a (CPU) */
	int profile_rdma_read;   /* 1 the device supports RDMA read, 0 it does not (g5, g6) */
	long long memlock;       /* RLIMIT_MEMLOCK soft limit in bytes of the caller, -1 unlimited.
	                            The plugin may overwrite it with the task's limit. */
	struct sq_efa_lib libfabric;  /* host <opt>/efa/lib* /libfabric.so* */
	struct sq_efa_lib ofi_nccl;   /* host <opt>/ofi-nccl/lib* /libnccl-net*.so (older
	                                 <opt>/aws-ofi-nccl) */
	char opt_root[SQ_EFA_PATH_LEN]; /* the opt root used, to name mount sources */
};

/* The image's own copies, found under its root at /opt/amazon/... and the usual
 * library directories. */
struct sq_efa_image {
	struct sq_efa_lib libfabric;
	struct sq_efa_lib ofi_nccl;
};

/* What the step asked for. */
struct sq_efa_request {
	int mode;                /* enum sq_efa_setting (options.h); UNSET counts as AUTO */
	const char *nccl_debug;  /* NULL/"" off; else the NCCL_DEBUG level (e.g. "INFO"); also
	                            sets NCCL_DEBUG_SUBSYS=INIT,NET */
	const char *user_set;    /* names the user set in the job environment, separated by
	                            ',' (NULL: none). Build it with sq_efa_var_name(). */
	const char *ld_library_path; /* LD_LIBRARY_PATH the container gets otherwise (last value
	                                in $ENROOT_ENVIRON, else the image's /etc/environment);
	                                host lib dirs are put in front of it. NULL: none. */
};

/* The plan. All strings heap-allocated, never NULL after success; free with
 * sq_efa_plan_free. */
struct sq_efa_plan {
	int active;              /* 1: EFA is used for this step (hook must run) */
	char *env;               /* "KEY=VALUE\n" lines */
	char *fstab;             /* "SRC DST none OPTS\n" lines (bind, read-only) */
	char *warnings;          /* "squall: ...\n" lines for stderr */
};

/* Detect the node. Never fails on a missing path, roots included (no EFA is an
 * answer); -1 only on a root that exists but is not a directory, with the line in err. */
int sq_efa_detect(const struct sq_efa_roots *roots, struct sq_efa_node *node,
		  char *err, size_t errlen);

/* List the image root (ENROOT_ROOTFS) for its own libfabric / aws-ofi-nccl.
 * -1 when rootfs is not a directory. */
int sq_efa_image_scan(const char *rootfs, struct sq_efa_image *image,
		      char *err, size_t errlen);

/* The plan for a step. image NULL: host-level plan (before the container exists).
 * Returns 0 (plan filled, possibly inactive) or -1 with the refusal in err (require
 * mode: what is missing and how to fix it); plan is empty on -1. */
int sq_efa_plan(const struct sq_efa_node *node, const struct sq_efa_image *image,
		const struct sq_efa_request *req, struct sq_efa_plan *plan,
		char *err, size_t errlen);
void sq_efa_plan_free(struct sq_efa_plan *plan);

/* The variables a plan may set, i = 0.. until NULL. The plugin checks each in the
 * job environment and passes the set ones as req.user_set / --user-set. Static. */
const char *sq_efa_var_name(int i);

/* argv for the hook (argv[0] = hook_path, NULL-terminated), e.g.
 *   squall-efa-hook --mode require --sysfs-root /sys --dev-root /dev
 *     --opt-root /opt/amazon --user-set NCCL_DEBUG,LD_LIBRARY_PATH --nccl-debug INFO
 * Options with an empty value are left out. Free with sq_efa_argv_free. NULL on OOM. */
char **sq_efa_hook_argv(const char *hook_path, const struct sq_efa_roots *roots,
			const struct sq_efa_request *req);
void sq_efa_argv_free(char **argv);

#endif
