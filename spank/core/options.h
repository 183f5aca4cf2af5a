/*
 * options.h: the container flags, their values, and where each came from.
 *
 * The one place the flag list lives: the plugin walks sq_opt_flag(0..count-1) and
 * registers each with spank_option_register(), using the flag's id as the option's
 * `val`, and its callback calls sq_opt_set(opts, val, optarg, SQ_SRC_CLI, ...).
 * mksbatch validates flags through the same sq_opt_set (sq_opt_check_value).
 *
 * Precedence (Pyxis rules):
 *  - the command line beats SQUALL_CONTAINER_<FLAG>, which beats PYXIS_CONTAINER_<FLAG>;
 *  - the same flag twice from the same source: fine with the same value, an error
 *    with a different one. Paired flags (--container-mount-home and
 *    --no-container-mount-home, --container-writable and --container-readonly)
 *    are one setting: giving both on the command line is a conflict.
 *
 * Environment variables: SQUALL_CONTAINER_<FLAG> and PYXIS_CONTAINER_<FLAG>, where
 * <FLAG> is the flag name after "container-", upper-cased, dashes to underscores
 * (--container-mount-home -> SQUALL_CONTAINER_MOUNT_HOME, --no-container-mount-home
 * -> SQUALL_CONTAINER_NO_MOUNT_HOME). Flags with an argument take it as the value.
 * Flags without an argument take a boolean: 1/true/yes/on means "as if the flag was
 * given", 0/false/no/off means "as if its opposite was given" (MOUNT_HOME=0 is
 * --no-container-mount-home; ENTRYPOINT_LOG=0 leaves it off); anything else is an
 * error naming the variable. An empty variable counts as unset.
 */
#ifndef SQUALL_CORE_OPTIONS_H
#define SQUALL_CORE_OPTIONS_H

#include <stddef.h>

enum sq_opt_id {
	SQ_OPT_IMAGE = 0,        /* --container-image=IMAGE */
	SQ_OPT_MOUNTS,           /* --container-mounts=SRC[:DST[:FLAGS]][,...] */
	SQ_OPT_WORKDIR,          /* --container-workdir=PATH */
	SQ_OPT_NAME,             /* --container-name=NAME[:auto|create|exec|no_exec] */
	SQ_OPT_SAVE,             /* --container-save=PATH */
	SQ_OPT_MOUNT_HOME,       /* --container-mount-home */
	SQ_OPT_NO_MOUNT_HOME,    /* --no-container-mount-home */
	SQ_OPT_REMAP_ROOT,       /* --container-remap-root */
	SQ_OPT_NO_REMAP_ROOT,    /* --no-container-remap-root */
	SQ_OPT_ENTRYPOINT,       /* --container-entrypoint */
	SQ_OPT_NO_ENTRYPOINT,    /* --no-container-entrypoint */
	SQ_OPT_ENTRYPOINT_LOG,   /* --container-entrypoint-log */
	SQ_OPT_WRITABLE,         /* --container-writable */
	SQ_OPT_READONLY,         /* --container-readonly */
	SQ_OPT_ENV,              /* --container-env=NAME[,NAME...] */
	SQ_OPT_EFA,              /* --container-efa=auto|require|off (squall) */
	SQ_OPT_NCCL_DEBUG,       /* --container-nccl-debug[=VERSION|WARN|INFO|TRACE] (squall; INFO) */
	SQ_OPT_LOG,              /* --container-log=quiet|verbose (squall) */
	SQ_OPT_UNSHARE,          /* --container-unshare=NS[,NS...] (net, ipc, uts; Pyxis 0.24) */
	SQ_OPT_REUSE,            /* --container-reuse (squall): keep the container for the job */
	SQ_OPT_NO_REUSE,         /* --no-container-reuse (squall): a container for this step */
	SQ_OPT_PRESTART,         /* --container-prestart=IMAGE (squall, sbatch/salloc): the job
				  * prolog starts the job's container on every node (prestart.h) */
	SQ_OPT_COUNT
};

/* Where a value came from; a higher number wins. */
enum sq_opt_source {
	SQ_SRC_NONE = 0,
	SQ_SRC_ENV_PYXIS = 1,    /* PYXIS_CONTAINER_<FLAG> */
	SQ_SRC_ENV_SQUALL = 2,   /* SQUALL_CONTAINER_<FLAG> */
	SQ_SRC_CLI = 3           /* srun/salloc/sbatch option or #SBATCH line */
};

enum sq_name_mode {
	SQ_NAME_AUTO = 0,        /* reuse if it exists, create otherwise (default) */
	SQ_NAME_CREATE,          /* fail if it exists */
	SQ_NAME_EXEC,            /* fail unless it is running; join it */
	SQ_NAME_NO_EXEC          /* reuse its rootfs, never join a running one */
};

/* EFA mode, shared by --container-efa and the plugstack `efa` argument. */
enum sq_efa_setting {
	SQ_EFA_SETTING_UNSET = 0,
	SQ_EFA_SETTING_AUTO,     /* inject when the node has EFA devices */
	SQ_EFA_SETTING_REQUIRE,  /* fail the step when the node has none */
	SQ_EFA_SETTING_OFF
};

/* --container-log and the plugstack `log` argument. */
enum sq_log_setting {
	SQ_LOG_UNSET = 0,
	SQ_LOG_QUIET,
	SQ_LOG_VERBOSE           /* per-phase timings on the user's terminal */
};

/* One row of the flag table. Strings are static: never free them. */
struct sq_flag {
	int id;                  /* enum sq_opt_id; use as spank_option.val */
	const char *name;        /* without dashes, e.g. "container-image" */
	int has_arg;             /* as spank's has_arg: 0 none, 1 required, 2 optional */
	const char *arg_info;    /* e.g. "IMAGE"; NULL when has_arg is 0 */
	const char *help;        /* one line for --help */
};

/*
 * All settings of one step. Strings are heap copies owned by the struct (free with
 * sq_opts_free); NULL when not set. Tri-state ints: -1 unset, 0 off, 1 on.
 * Values are validated when set: image with sq_imgref_parse, mounts with
 * sq_mounts_parse, env names as identifiers, paths as clean UTF-8 text, namespaces with
 * sq_unshare_parse.
 */
struct sq_opts {
	char *image;             /* raw --container-image */
	char *mounts;            /* raw --container-mounts */
	char *workdir;           /* absolute, or relative to the container's working directory */
	char *name;              /* NAME part of --container-name */
	int name_mode;           /* enum sq_name_mode */
	char *save;              /* --container-save PATH */
	int mount_home;
	int remap_root;
	int entrypoint;
	int entrypoint_log;
	int writable;            /* -1 unset, 0 read-only, 1 writable */
	char *env;               /* raw comma list of variable names */
	int efa;                 /* enum sq_efa_setting */
	char *nccl_debug;        /* upper-case NCCL_DEBUG level */
	int log;                 /* enum sq_log_setting */
	int unshare;             /* SQ_NS_* bits (unshare.h); 0: share the node's */
	int reuse;               /* -1 unset (plugstack container_reuse), 0 no, 1 yes */
	char *prestart;          /* raw --container-prestart: the image the prolog starts */
	/* bookkeeping for the precedence rules, indexed by the setting's primary id */
	int source[SQ_OPT_COUNT];        /* enum sq_opt_source */
	char *given[SQ_OPT_COUNT];       /* normalised value as given, for "same value twice" */
};

void sq_opts_init(struct sq_opts *o);
/* Free every string and reset o to the sq_opts_init state. */
void sq_opts_free(struct sq_opts *o);

/* The flag table: sq_opt_flag(i) for i < sq_opt_flag_count(), NULL past the end. */
size_t sq_opt_flag_count(void);
const struct sq_flag *sq_opt_flag(size_t i);

/* Flag id for "container-image" or "--container-image"; -1 when unknown. */
int sq_opt_lookup(const char *name);

/*
 * Set flag `id` from `source`. value: the argument (NULL for flags without one on the
 * command line; for those a non-NULL value is read as a boolean, see above).
 * A lower-priority source than the one already recorded is ignored (returns 0).
 * 0 ok, -1 error: err names the flag (or the variable for environment sources).
 */
int sq_opt_set(struct sq_opts *o, int id, const char *value, int source, char *err, size_t errlen);
/* Same, by flag name (with or without leading dashes); unknown names are an error. */
int sq_opt_set_by_name(struct sq_opts *o, const char *flag, const char *value, int source,
		       char *err, size_t errlen);

/* Environment variable name for flag `id` with prefix "SQUALL_" or "PYXIS_"
 * (e.g. SQUALL_CONTAINER_MOUNT_HOME). 0 ok, -1 if id is unknown or buf too small. */
int sq_opt_env_name(int id, const char *prefix, char *buf, size_t buflen);

/*
 * Apply SQUALL_CONTAINER_* and PYXIS_CONTAINER_* variables from envp (a NULL-terminated
 * KEY=VALUE array: environ in srun, the S_JOB_ENV item in slurmstepd). Call it before or
 * after the command-line callbacks: precedence is by source, not by order.
 * 0 ok, -1 error naming the variable.
 */
int sq_opts_load_environ(struct sq_opts *o, char *const envp[], char *err, size_t errlen);

/*
 * Final check once every source is applied.
 * Returns 1: a container is requested (image or name given);
 *         0: no container; if flags were given on the command line without an image or
 *            name, warn holds a one-line warning naming them (else warn is ""; none with
 *            --container-prestart, whose container they shape);
 *        -1: error (err filled) for combinations that cannot work, e.g.
 *            --container-name=x:create without --container-image (nothing to create from).
 */
int sq_opts_check(const struct sq_opts *o, char *warn, size_t warnlen, char *err, size_t errlen);

/* 1 when the flags let a step keep its container for the job (an image, no
 * --container-name, no --container-save, --no-container-reuse not given), so the job
 * prolog may start it before the step (prestart.h); the plugstack's container_reuse and
 * the entrypoint are decided later, by sq_life_decide. */
int sq_opts_kept_for_job(const struct sq_opts *o);

/* Validate one flag value with the plugin's own parser, without keeping it.
 * flag: "container-mounts" (dashes optional); value NULL for flags without argument. */
int sq_opt_check_value(const char *flag, const char *value, char *err, size_t errlen);

/* Split NAME[:FLAG] of --container-name. *name is a heap string (free with
 * sq_str_free); *mode an enum sq_name_mode. Names: [A-Za-z0-9][A-Za-z0-9_.+-]*, at most
 * 128 bytes (they become directory names). 0 ok, -1 error. */
int sq_opt_parse_name(const char *text, char **name, int *mode, char *err, size_t errlen);
/* "auto", "create", "exec", "no_exec"; "?" for anything else. Static string. */
const char *sq_name_mode_str(int mode);

/* Parse "auto|require|off" and "quiet|verbose" (exact, lower-case). `what` names the
 * flag or argument in the error. 0 ok, -1 error. */
int sq_efa_setting_parse(const char *what, const char *value, int *out, char *err, size_t errlen);
int sq_log_setting_parse(const char *what, const char *value, int *out, char *err, size_t errlen);
const char *sq_efa_setting_str(int setting);
const char *sq_log_setting_str(int setting);

#endif
