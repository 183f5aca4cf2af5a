/* metrics.c: see metrics.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "metrics.h"

const double sq_metrics_bounds[SQ_METRICS_NBUCKETS] = {
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600
};

static const char *const source_names[SQ_MSRC_N] = { "image", "local_copy", "kept", "joined" };
static const char *const phase_names[SQ_MPH_N] = { "resolve", "prepare", "start", "join" };
static const char *const reason_names[SQ_MREASON_N] = {
	"options", "setup", "resolve", "build", "policy", "configure", "start", "join", "other"
};

/* A step longer than a day is a clock gone wrong, not a step. */
#define MAX_SECONDS 86400.0

void sq_metrics_init(struct sq_metrics_record *r)
{
	memset(r, 0, sizeof(*r));
	r->magic = SQ_METRICS_MAGIC;
	r->version = SQ_METRICS_VERSION;
	r->size = (uint32_t)sizeof(*r);
}

int sq_metrics_load(struct sq_metrics_record *r, const void *buf, size_t len)
{
	struct sq_metrics_record in;

	sq_metrics_init(r);
	if (len == 0)
		return 0;
	if (buf == NULL || len != sizeof(in))
		goto reset;
	memcpy(&in, buf, sizeof(in));
	if (in.magic != SQ_METRICS_MAGIC || in.version != SQ_METRICS_VERSION ||
	    in.size != sizeof(in))
		goto reset;
	*r = in;
	r->pad = 0;
	return 0;
reset:
	r->resets = 1;
	return -1;
}

void sq_metrics_step_init(struct sq_metrics_step *s)
{
	memset(s, 0, sizeof(*s));
	s->source = -1;
	s->local_copy = -1;
	s->build = -1;
	s->reason = -1;
	for (int i = 0; i < SQ_MPH_N; i++)
		s->phase_s[i] = -1;
}

static void observe(struct sq_metrics_hist *h, double s)
{
	int i;

	if (!(s >= 0))      /* also NaN */
		return;
	if (s > MAX_SECONDS)
		s = MAX_SECONDS;
	for (i = 0; i < SQ_METRICS_NBUCKETS && s > sq_metrics_bounds[i]; i++)
		;
	if (i < SQ_METRICS_NBUCKETS)
		h->bucket[i]++;
	h->count++;
	h->sum_us += (uint64_t)(s * 1e6 + 0.5);
}

void sq_metrics_add(struct sq_metrics_record *r, const struct sq_metrics_step *s)
{
	if (s->reason >= 0) {
		r->steps_failed++;
		r->failures[s->reason < SQ_MREASON_N ? s->reason : SQ_MREASON_OTHER]++;
		if (s->reason == SQ_MREASON_POLICY)
			r->policy_refusals++;
	} else {
		r->steps_ok++;
	}
	if (s->source >= 0 && s->source < SQ_MSRC_N)
		r->starts[s->source]++;
	if (s->source == SQ_MSRC_IMAGE)
		r->shared_image_bytes += s->image_bytes;
	if (s->local_copy == 1)
		r->local_copy_hits++;
	else if (s->local_copy == 0)
		r->local_copy_misses++;
	for (int i = 0; i < SQ_MPH_N; i++)
		observe(&r->phase[i], s->phase_s[i]);
	if (s->build == 1 || s->build == 0) {
		if (s->build)
			r->builds_ok++;
		else
			r->builds_failed++;
		observe(&r->build, s->build_s);
	}
}

/* The text being rendered: appends stop at the first overflow, which is remembered. */
struct out {
	char *p;
	size_t len, cap;
	int full;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->full)
		return;
	va_start(ap, fmt);
	n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= o->cap - o->len) {
		o->full = 1;
		return;
	}
	o->len += (size_t)n;
}

static void head(struct out *o, const char *name, const char *type, const char *help)
{
	put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(struct out *o, const char *name, const char *help, uint64_t v)
{
	head(o, name, "counter", help);
	put(o, "%s %llu\n", name, (unsigned long long)v);
}

/* One labelled counter family: n values, label values from names. */
static void family(struct out *o, const char *name, const char *help, const char *label,
		   const char *const *names, const uint64_t *v, int n)
{
	head(o, name, "counter", help);
	for (int i = 0; i < n; i++)
		put(o, "%s{%s=\"%s\"} %llu\n", name, label, names[i], (unsigned long long)v[i]);
}

/* One histogram series: lab is "" or `label="value"`. */
static void hist(struct out *o, const char *name, const char *lab,
		 const struct sq_metrics_hist *h)
{
	uint64_t cum = 0;
	const char *sep = lab[0] ? "," : "";

	for (int i = 0; i < SQ_METRICS_NBUCKETS; i++) {
		cum += h->bucket[i];
		put(o, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, lab, sep, sq_metrics_bounds[i],
		    (unsigned long long)cum);
	}
	put(o, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, lab, sep, (unsigned long long)h->count);
	put(o, "%s_sum%s%s%s %llu.%06llu\n", name, lab[0] ? "{" : "", lab, lab[0] ? "}" : "",
	    (unsigned long long)(h->sum_us / 1000000), (unsigned long long)(h->sum_us % 1000000));
	put(o, "%s_count%s%s%s %llu\n", name, lab[0] ? "{" : "", lab, lab[0] ? "}" : "",
	    (unsigned long long)h->count);
}

int sq_metrics_render(const struct sq_metrics_record *r, long long now, char *out,
		      size_t outlen)
{
	static const char *const results[2] = { "ok", "failed" };
	static const char *const lookups[2] = { "hit", "miss" };
	struct out o = { out, 0, outlen, outlen == 0 };
	uint64_t steps[2] = { r->steps_ok, r->steps_failed };
	uint64_t copy[2] = { r->local_copy_hits, r->local_copy_misses };
	uint64_t builds[2] = { r->builds_ok, r->builds_failed };
	char lab[32];

	family(&o, "squall_steps_total", "Container steps ended on this node, by result.",
	       "result", results, steps, 2);
	family(&o, "squall_container_starts_total", "Container steps by where their container "
	       "came from.", "source", source_names, r->starts, SQ_MSRC_N);
	head(&o, "squall_phase_seconds", "histogram", "Time of each phase of a container "
	     "step's start, in seconds.");
	for (int i = 0; i < SQ_MPH_N; i++) {
		snprintf(lab, sizeof(lab), "phase=\"%s\"", phase_names[i]);
		hist(&o, "squall_phase_seconds", lab, &r->phase[i]);
	}
	family(&o, "squall_local_copy_lookups_total", "Container starts that looked for the "
	       "node-local extracted copy of their image, by result.", "result", lookups, copy, 2);
	counter(&o, "squall_shared_image_bytes_total", "Size of the image files containers were "
		"started from (read through squashfuse: an upper bound on the bytes read).",
		r->shared_image_bytes);
	family(&o, "squall_image_builds_total", "Runs of sqshbuild for a registry image "
	       "(a pull, or a hit in the shared cache), by result.", "result", results, builds, 2);
	head(&o, "squall_image_build_seconds", "histogram", "Time of sqshbuild for a registry "
	     "image, in seconds.");
	hist(&o, "squall_image_build_seconds", "", &r->build);
	family(&o, "squall_failures_total", "Container steps that failed, by reason.", "reason",
	       reason_names, r->failures, SQ_MREASON_N);
	counter(&o, "squall_policy_refusals_total", "Images the site image policy refused.",
		r->policy_refusals);
	counter(&o, "squall_metrics_resets_total", "Times the node's metrics record was "
		"unreadable and started again from zero.", r->resets);
	head(&o, "squall_metrics_updated_timestamp_seconds", "gauge", "When a step last updated "
	     "these metrics (unix time).");
	put(&o, "squall_metrics_updated_timestamp_seconds %lld\n", now);
	if (o.full) {
		if (outlen > 0)
			out[0] = '\0';
		return -1;
	}
	return (int)o.len;
}

int sq_metrics_phase_of(const char *name)
{
	if (name == NULL)
		return -1;
	if (strcmp(name, "resolve image") == 0)
		return SQ_MPH_RESOLVE;
	if (strcmp(name, "prepare") == 0)
		return SQ_MPH_PREPARE;
	if (strncmp(name, "start container", 15) == 0 || strcmp(name, "kept container reused") == 0 ||
	    strcmp(name, "fresh layer") == 0 || strcmp(name, "join running container") == 0)
		return SQ_MPH_START;
	if (strcmp(name, "join") == 0)
		return SQ_MPH_JOIN;
	return -1;
}

int sq_metrics_source_of(const char *served, int joined, int cache_on, int *local_copy)
{
	*local_copy = -1;
	if (joined)
		return SQ_MSRC_JOINED;
	if (served != NULL && strncmp(served, "kept container of the job reused", 32) == 0)
		return SQ_MSRC_KEPT;
	if (served != NULL && strstr(served, "(extracted cache hit)") != NULL) {
		*local_copy = 1;
		return SQ_MSRC_LOCAL_COPY;
	}
	/* A kept container started from the file: the node's copy was looked for (when the
	 * node has a cache) and not there. A container of the step's own never looks. */
	if (cache_on && served != NULL && strncmp(served, "started from the image, kept", 28) == 0)
		*local_copy = 0;
	return SQ_MSRC_IMAGE;
}

int sq_metrics_reason_of(int stage, const char *error)
{
	const char *e = error != NULL ? error : "";

	if (strstr(e, "the site policy") != NULL && strstr(e, " refuses ") != NULL)
		return SQ_MREASON_POLICY;
	switch (stage) {
	case SQ_MSTAGE_OPTIONS:
		return SQ_MREASON_OPTIONS;
	case SQ_MSTAGE_PREPARE:
		return SQ_MREASON_SETUP;
	case SQ_MSTAGE_RESOLVE:
		return strncmp(e, "failed to import docker image", 29) == 0 ? SQ_MREASON_BUILD
									    : SQ_MREASON_RESOLVE;
	case SQ_MSTAGE_CONFIGURE:
		return SQ_MREASON_CONFIGURE;
	case SQ_MSTAGE_START:
		return SQ_MREASON_START;
	case SQ_MSTAGE_JOIN:
		return SQ_MREASON_JOIN;
	default:
		return SQ_MREASON_OTHER;
	}
}

const char *sq_metrics_source_name(int source)
{
	return source >= 0 && source < SQ_MSRC_N ? source_names[source] : "";
}

const char *sq_metrics_phase_name(int phase)
{
	return phase >= 0 && phase < SQ_MPH_N ? phase_names[phase] : "";
}

const char *sq_metrics_reason_name(int reason)
{
	return reason >= 0 && reason < SQ_MREASON_N ? reason_names[reason] : "";
}
