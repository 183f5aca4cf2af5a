"""plugstack.conf arguments (spank/core/config.c), driven through cffi."""

import pytest

from squall.core import parse_plugstack_args
from squall.errors import SquallError

DEFAULTS = {
    "runtime_path": "/run/squall", "enroot": "/usr/bin/enroot",
    "sqshbuild": "/usr/local/bin/sqshbuild", "image_cache": "/fsx/squall/images",
    "container_scope": "job", "execute_entrypoint": False, "efa": "auto",
    "efa_sysfs_root": "/sys", "efa_dev_root": "/dev", "efa_opt_root": "/opt/amazon",
    "sbatch_support": True, "log": "quiet", "container_reuse": True,
    "local_cache": "/var/lib/squall/cache", "local_cache_gb": 20,
}


def test_defaults():
    assert parse_plugstack_args([]) == DEFAULTS


def test_every_key_can_be_set():
    args = ["runtime_path=/run/sq", "enroot=/opt/enroot-test-runtime/bin/enroot",
            "sqshbuild=/usr/bin/sqshbuild", "image_cache=/fsx/cache", "container_scope=global",
            "execute_entrypoint=1", "efa=require", "efa_sysfs_root=/tmp/sys",
            "efa_dev_root=/tmp/dev", "efa_opt_root=/tmp/opt", "sbatch_support=0",
            "log=verbose", "container_reuse=0", "local_cache=/scratch/sq", "local_cache_gb=0"]
    assert parse_plugstack_args(args) == {
        "runtime_path": "/run/sq", "enroot": "/opt/enroot-test-runtime/bin/enroot",
        "sqshbuild": "/usr/bin/sqshbuild", "image_cache": "/fsx/cache",
        "container_scope": "global", "execute_entrypoint": True, "efa": "require",
        "efa_sysfs_root": "/tmp/sys", "efa_dev_root": "/tmp/dev", "efa_opt_root": "/tmp/opt",
        "sbatch_support": False, "log": "verbose", "container_reuse": False,
        "local_cache": "/scratch/sq", "local_cache_gb": 0,
    }


@pytest.mark.parametrize(
    ("arg", "needle"),
    [
        ("bogus=1", "unknown argument 'bogus=1'"),
        ("local_cache_gb=-1", "local_cache_gb must be a whole number"),
        ("local_cache_gb=2G", "local_cache_gb must be a whole number"),
        ("local_cache=relative", "local_cache must be an absolute path"),
        ("use_squashfuse=1", "unknown argument 'use_squashfuse=1'"),
        ("runtime_path", "argument 'runtime_path' is not key=value"),
        ("runtime_path=", "empty value for runtime_path"),
        ("runtime_path=relative", "runtime_path must be an absolute path"),
        ("enroot=/usr/bin/en root", "enroot must be an absolute path without spaces"),
        ("image_cache=/a\nb", "holds a control character"),
        ("image_cache=/" + "x" * 5000, "is 5001 bytes long"),
        ("container_scope=node", "container_scope must be job or global"),
        ("execute_entrypoint=yes", "execute_entrypoint must be 0 or 1"),
        ("execute_entrypoint=2", "execute_entrypoint must be 0 or 1"),
        ("efa=on", "argument efa: 'on' is not an EFA mode"),
        ("log=debug", "argument log: 'debug' is not a log level"),
        ("=x", "unknown argument '=x'"),
    ],
)
def test_bad_arguments_name_themselves(arg, needle):
    with pytest.raises(SquallError) as exc:
        parse_plugstack_args(["sbatch_support=1", arg])
    msg = str(exc.value)
    assert msg.startswith("plugstack.conf:") and needle in msg, msg


def test_twice_is_an_error():
    with pytest.raises(SquallError, match="argument efa given twice"):
        parse_plugstack_args(["efa=off", "efa=off"])


def test_non_utf8_value_refused():
    with pytest.raises(SquallError, match="not valid UTF-8"):
        parse_plugstack_args([b"image_cache=/fsx/\xff"])
