/*
 * metrics.h: a node's counters and histograms of container steps, for the Prometheus
 * node_exporter textfile collector (docs/metrics.md).
 *
 * Pure: the plugin (spank/plugin/metrics.c) keeps one struct sq_metrics_record per node
 * in a root-only file, read, added to (sq_metrics_add) and written back under an flock at
 * each container step's end, then renders it (sq_metrics_render) into the textfile
 * directory. Every label takes one of a fixed set of values, so the text has a fixed
 * number of series and a bound on its size (SQ_METRICS_TEXT_MAX).
 */
#ifndef SQUALL_CORE_METRICS_H
#define SQUALL_CORE_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* Where a step's container came from (label source). */
enum sq_metrics_source {
	SQ_MSRC_IMAGE = 0,   /* the runtime started from the image file (.sqsh) */
	SQ_MSRC_LOCAL_COPY,  /* the runtime started from the node's extracted copy */
	SQ_MSRC_KEPT,        /* the job's kept container, reused: no runtime start */
	SQ_MSRC_JOINED,      /* a container another step runs (--container-name) */
	SQ_MSRC_N
};

/* The timed phases (label phase), as --container-log=verbose names them. */
enum sq_metrics_phase {
	SQ_MPH_RESOLVE = 0,  /* "resolve image" (from user_init's start) */
	SQ_MPH_PREPARE,      /* "prepare": the conf file, the target */
	SQ_MPH_START,        /* "start container...", "kept container reused", "fresh layer",
			      * "join running container" */
	SQ_MPH_JOIN,         /* local task 0 entering the container (task_init) */
	SQ_MPH_N
};

/* How far a step got (the plugin's stage when it failed). */
enum sq_metrics_stage {
	SQ_MSTAGE_OPTIONS = 0, /* the flags, before user_init */
	SQ_MSTAGE_PREPARE,
	SQ_MSTAGE_RESOLVE,
	SQ_MSTAGE_CONFIGURE,
	SQ_MSTAGE_START,
	SQ_MSTAGE_JOIN
};

/* Why a step failed (label reason). */
enum sq_metrics_reason {
	SQ_MREASON_OPTIONS = 0, /* a flag or its environment variable */
	SQ_MREASON_SETUP,       /* the node: runtime directory, helpers, runtime */
	SQ_MREASON_RESOLVE,     /* the image file (missing, unreadable, not squashfs) */
	SQ_MREASON_BUILD,       /* sqshbuild failed for a registry image */
	SQ_MREASON_POLICY,      /* the site image policy refused it */
	SQ_MREASON_CONFIGURE,   /* mounts, environment, the named/saved container */
	SQ_MREASON_START,       /* the runtime did not start, or the kept container */
	SQ_MREASON_JOIN,        /* a task could not enter the container */
	SQ_MREASON_OTHER,
	SQ_MREASON_N
};

/* Histogram upper bounds in seconds, the same for every histogram (+Inf is the count). */
#define SQ_METRICS_NBUCKETS 16
extern const double sq_metrics_bounds[SQ_METRICS_NBUCKETS];

#define SQ_METRICS_MAGIC 0x314d5153u  /* "SQM1" */
#define SQ_METRICS_VERSION 1u
/* The rendered text never exceeds this (a fixed number of series, 20 digits each). */
#define SQ_METRICS_TEXT_MAX 16384

struct sq_metrics_hist {
	uint64_t bucket[SQ_METRICS_NBUCKETS];  /* not cumulative: observations in (prev, le] */
	uint64_t count;
	uint64_t sum_us;                       /* microseconds */
};

/* The node's record, stored as is (host byte order: it never leaves the node). */
struct sq_metrics_record {
	uint32_t magic, version, size, pad;
	uint64_t steps_ok, steps_failed;
	uint64_t starts[SQ_MSRC_N];
	uint64_t local_copy_hits, local_copy_misses;
	uint64_t shared_image_bytes;
	uint64_t builds_ok, builds_failed;
	uint64_t policy_refusals;
	uint64_t failures[SQ_MREASON_N];
	uint64_t resets;                       /* the record was unreadable and restarted */
	struct sq_metrics_hist phase[SQ_MPH_N];
	struct sq_metrics_hist build;
};

/* What one step on one node adds. */
struct sq_metrics_step {
	int source;                    /* enum sq_metrics_source, -1: no container */
	int local_copy;                /* 1 hit, 0 miss, -1 the node's copy was not asked */
	uint64_t image_bytes;          /* size of the image file started from (source image) */
	double phase_s[SQ_MPH_N];      /* seconds; < 0: not measured */
	int build;                     /* 1 sqshbuild ran and succeeded, 0 it failed, -1 none */
	double build_s;
	int reason;                    /* enum sq_metrics_reason, -1: the step did not fail */
};

/* An empty record, counters at zero. */
void sq_metrics_init(struct sq_metrics_record *r);
/* The record from len bytes read from its file: 0 when they are a record of this
 * version; otherwise r is a fresh record with resets 1 more than nothing (1), and -1. An
 * empty file (len 0) is a fresh record and 0. */
int sq_metrics_load(struct sq_metrics_record *r, const void *buf, size_t len);
/* An empty step (nothing measured, no failure). */
void sq_metrics_step_init(struct sq_metrics_step *s);
/* Add one step; values out of range are clamped or ignored, never trusted. */
void sq_metrics_add(struct sq_metrics_record *r, const struct sq_metrics_step *s);
/* The record as node_exporter's text format into out (NUL-terminated); now: the unix time
 * of this update (squall_metrics_updated_timestamp_seconds). Returns the length, or -1
 * when outlen is too small (SQ_METRICS_TEXT_MAX always suffices). */
int sq_metrics_render(const struct sq_metrics_record *r, long long now, char *out,
		      size_t outlen);

/* The phase a --container-log=verbose name counts in, or -1. */
int sq_metrics_phase_of(const char *name);
/* The source of a step's container from how it was served (the verbose log's text) and
 * whether it joined a running container. local_copy: set to 1 hit, 0 miss, -1 not asked. */
int sq_metrics_source_of(const char *served, int joined, int cache_on, int *local_copy);
/* Why a step that failed at stage failed, from its one error line. */
int sq_metrics_reason_of(int stage, const char *error);
/* A label value's text ("image", "resolve", ...); "" out of range. */
const char *sq_metrics_source_name(int source);
const char *sq_metrics_phase_name(int phase);
const char *sq_metrics_reason_name(int reason);

#endif
