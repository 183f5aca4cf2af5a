/* fuzz_imageref: --container-image references (sq_imgref_parse) and sqshbuild's parse of
 * them (sq_imgref_parse_as with SQ_IMGREF_ARCHIVES). A parsed reference's canonical form
 * parses back to itself; the two parses accept the same texts but for the archive and
 * layout forms, which only sqshbuild's takes, and agree on what they both accept. */
#include "fuzz.h"
#include "imageref.h"

static int is_archive(int kind)
{
	return kind == SQ_IMAGE_DOCKER_ARCHIVE || kind == SQ_IMAGE_OCI_ARCHIVE ||
	       kind == SQ_IMAGE_OCI_DIR;
}

static void same_or_abort(const char *a, const char *b)
{
	if ((a == NULL) != (b == NULL) || (a != NULL && strcmp(a, b) != 0))
		abort();
}

/* The canonical form of ref, parsed again with flags, is itself and of the same kind. */
static void check_fixed_point(const struct sq_image_ref *ref, int flags)
{
	struct sq_image_ref again;
	char err[512];

	if (ref->kind == SQ_IMAGE_FILE)
		return;
	if (sq_imgref_parse_as(ref->canonical, flags, &again, err, sizeof(err)) != 0 ||
	    strcmp(again.canonical, ref->canonical) != 0 || again.kind != ref->kind)
		abort();
	sq_imgref_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *in = fz_dup(data, size), err[512], err2[512];
	struct sq_image_ref ref, any;
	int rc, rc_any;

	rc = sq_imgref_parse(in, &ref, err, sizeof(err));
	fz_check_err(rc, err, sizeof(err));
	rc_any = sq_imgref_parse_as(in, SQ_IMGREF_ARCHIVES, &any, err2, sizeof(err2));
	fz_check_err(rc_any, err2, sizeof(err2));
	if (rc == 0) {
		check_fixed_point(&ref, 0);
		if (rc_any != 0 || any.kind != ref.kind || is_archive(ref.kind))
			abort();
		same_or_abort(ref.canonical, any.canonical);
		same_or_abort(ref.registry, any.registry);
		same_or_abort(ref.repository, any.repository);
		same_or_abort(ref.tag, any.tag);
		same_or_abort(ref.digest, any.digest);
		same_or_abort(ref.path, any.path);
	} else if (rc_any == 0) {
		/* Only an archive is the plugin's to refuse and sqshbuild's to take. */
		if (!is_archive(any.kind) || any.path == NULL || any.path[0] == '\0')
			abort();
		check_fixed_point(&any, SQ_IMGREF_ARCHIVES);
	} else if (strcmp(err, err2) != 0) {
		abort(); /* both refuse, for the same reason */
	}
	sq_imgref_free(&ref);
	sq_imgref_free(&any);
	rc = sq_imgref_parse(in, &ref, err, 20);
	fz_check_err(rc, err, 20);
	sq_imgref_free(&ref);
	free(in);
	return 0;
}
