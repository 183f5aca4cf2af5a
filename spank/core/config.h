/*
 * config.h: plugstack.conf arguments (`optional squall.so key=value ...`).
 *
 *   key                 default                     value
 *   runtime_path        /run/squall                 absolute directory for per-step state
 *   enroot              (enroot on PATH)            absolute path of the runtime executable;
 *                                                   unset: `enroot` found on slurmstepd's
 *                                                   PATH when a step starts, as Pyxis runs it
 *   sqshbuild           /usr/local/bin/sqshbuild    absolute path of the image builder
 *   image_cache         /fsx/squall/images          absolute shared cache directory
 *   container_scope     global                      job | global (as Pyxis)
 *   execute_entrypoint  0                           boolean (default of --container-entrypoint)
 *   efa                 auto                        auto | require | off (default of --container-efa)
 *   efa_sysfs_root      /sys                        absolute; where EFA detection looks
 *   efa_dev_root        /dev                        absolute
 *   efa_opt_root        /opt/amazon                 absolute
 *   sbatch_support      1                           boolean (run batch scripts in the container)
 *   log                 quiet                       quiet | verbose (default of --container-log)
 *   use_squashfuse      0                           boolean; Pyxis's key: squall always starts
 *                                                   an image straight from its squashfs file
 *   use_enroot_load     0                           boolean: registry images go through
 *                                                   `enroot load` (Pyxis's meaning), not sqshbuild
 *   importer            (none)                      absolute path of the site's importer
 *                                                   (Pyxis's `get URI` / `release` protocol)
 *   container_name_strict 0                         boolean: a named container found with
 *                                                   another image is refused, not reused
 *   container_reuse     1                           0 | 1 (default of --[no-]container-reuse)
 *   local_cache         /var/lib/squall/cache       absolute; node-local extracted images
 *   local_cache_gb      20                          0..100000 per user (0: no local cache)
 *   local_cache_max_nodes 16                        0..1000000: jobs on more nodes start no
 *                                                   extraction (they use trees already
 *                                                   there); 0: any number of nodes
 *   local_cache_copy_wait 90                        1..3600 seconds a node of a step waits
 *                                                   for the image its first node sends
 *                                                   before it reads the image itself
 *   prestart_srun_jobs  0                           boolean: a job srun allocates with
 *                                                   --container-image=FILE gets its
 *                                                   container started by the job prolog
 *                                                   (prestart.h)
 *   metrics_dir         /var/lib/prometheus/node-exporter
 *                                                   absolute; node_exporter's textfile
 *                                                   directory, where squall.prom goes
 *                                                   (docs/metrics.md); none: no metrics
 *
 * Booleans take Pyxis's spellings, any case: 1 true yes y (on) and 0 false no n (off).
 * An unknown key, a missing '=', an empty or malformed value, or a key given twice is
 * an error naming the argument: the plugin then refuses to load.
 * Documented for administrators in docs/plugstack-arguments.md.
 */
#ifndef SQUALL_CORE_CONFIG_H
#define SQUALL_CORE_CONFIG_H

#include <stddef.h>

enum sq_scope {
	SQ_SCOPE_JOB = 0,     /* container names carry the job id; removed at job end */
	SQ_SCOPE_GLOBAL       /* names live across jobs */
};

/* Strings are heap copies owned by the struct: free with sq_config_free. */
struct sq_config {
	char *runtime_path;
	char *enroot;            /* NULL: `enroot` on slurmstepd's PATH */
	char *sqshbuild;
	char *image_cache;
	int container_scope;     /* enum sq_scope */
	int execute_entrypoint;  /* 0 | 1 */
	int efa;                 /* enum sq_efa_setting (options.h), never UNSET */
	char *efa_sysfs_root;
	char *efa_dev_root;
	char *efa_opt_root;
	int sbatch_support;      /* 0 | 1 */
	int log;                 /* enum sq_log_setting (options.h), never UNSET */
	int use_squashfuse;      /* 0 | 1: accepted for Pyxis's lines; no effect */
	int use_enroot_load;     /* 0 | 1 */
	char *importer;          /* NULL: none */
	int container_name_strict; /* 0 | 1 */
	int container_reuse;     /* 0 | 1: later steps of a job reuse the node's container */
	char *local_cache;       /* node-local cache of extracted images (nodecache.h) */
	int local_cache_gb;      /* its size limit per user in GiB; 0: not used */
	int local_cache_max_nodes; /* jobs on more nodes do not fill it; 0: any number */
	int local_cache_copy_wait; /* seconds a node waits for a step's copy to begin */
	int prestart_srun_jobs;  /* 0 | 1: the prolog starts the container of srun's own jobs */
	char *metrics_dir;       /* node_exporter's textfile directory; NULL: none (off) */
};

/* Fill c with the defaults, then apply argv[0..argc) (the plugin's ac/av).
 * 0 ok; -1 error (err: "plugstack.conf: ..." naming the argument), c then freed.
 * Call sq_config_free on success when done. */
int sq_config_parse(struct sq_config *c, int argc, char *const argv[], char *err, size_t errlen);
void sq_config_free(struct sq_config *c);

#endif
