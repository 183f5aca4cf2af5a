"""The image caches: the shared one that root and the builder write and every user reads,
and each user's own (docs/security.md). One module a job: :mod:`.layout` (names),
:mod:`.dirs` (directories and who may write them), :mod:`.image_cache` (entries and whose
are used), :mod:`.index` (reference -> digest), :mod:`.publish`, :mod:`.leftovers`,
:mod:`.gc`, :mod:`.convert` (an earlier squall's ``1777`` cache)."""

from squall.sqshbuild.cache.image_cache import (
    ImageCache,
    open_private,
    open_reader,
    open_shared,
)
from squall.sqshbuild.cache.layout import (
    FILE_MODE,
    TMP_PREFIX,
    default_cache_dir,
    disk_error,
    entry_name,
    fsync_dir,
    parse_size,
    user_cache_dir,
    work_dir_prefix,
)

__all__ = ["FILE_MODE", "TMP_PREFIX", "ImageCache", "default_cache_dir", "disk_error",
           "entry_name", "fsync_dir", "open_private", "open_reader", "open_shared",
           "parse_size", "user_cache_dir", "work_dir_prefix"]
