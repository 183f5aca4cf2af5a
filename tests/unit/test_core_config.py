"""plugstack.conf arguments (spank/core/config.c), driven through cffi."""

import pytest

from squall.core import parse_plugstack_args
from squall.errors import SquallError

DEFAULTS = {
    "runtime_path": "/run/squall", "enroot": None,
    "sqshbuild": "/usr/local/bin/sqshbuild", "image_cache": "/fsx/squall/images",
    "container_scope": "global", "execute_entrypoint": False, "efa": "auto",
    "efa_sysfs_root": "/sys", "efa_dev_root": "/dev", "efa_opt_root": "/opt/amazon",
    "sbatch_support": True, "log": "quiet", "use_squashfuse": False,
    "use_enroot_load": False, "importer": None, "container_name_strict": False,
    "container_reuse": True,
    "local_cache": "/var/lib/squall/cache", "local_cache_gb": 20,
    "local_cache_max_nodes": 16, "local_cache_copy_wait": 90, "prestart_srun_jobs": False,
    "metrics_dir": "/var/lib/prometheus/node-exporter",
}


def test_defaults():
    assert parse_plugstack_args([]) == DEFAULTS


def test_every_key_can_be_set():
    args = ["runtime_path=/run/sq", "enroot=/usr/bin/enroot",
            "sqshbuild=/usr/bin/sqshbuild", "image_cache=/fsx/cache", "container_scope=global",
            "execute_entrypoint=1", "efa=require", "efa_sysfs_root=/tmp/sys",
            "efa_dev_root=/tmp/dev", "efa_opt_root=/tmp/opt", "sbatch_support=0",
            "log=verbose", "use_squashfuse=1", "use_enroot_load=1",
            "importer=/usr/share/pyxis/importers/caching_importer.sh",
            "container_name_strict=1", "container_reuse=0",
            "local_cache=/scratch/sq", "local_cache_gb=0", "local_cache_max_nodes=0",
            "local_cache_copy_wait=5", "prestart_srun_jobs=yes", "metrics_dir=/srv/textfile"]
    assert parse_plugstack_args(args) == {
        "runtime_path": "/run/sq", "enroot": "/usr/bin/enroot",
        "sqshbuild": "/usr/bin/sqshbuild", "image_cache": "/fsx/cache",
        "container_scope": "global", "execute_entrypoint": True, "efa": "require",
        "efa_sysfs_root": "/tmp/sys", "efa_dev_root": "/tmp/dev", "efa_opt_root": "/tmp/opt",
        "sbatch_support": False, "log": "verbose", "use_squashfuse": True,
        "use_enroot_load": True, "importer": "/usr/share/pyxis/importers/caching_importer.sh",
        "container_name_strict": True,
        "container_reuse": False,
        "local_cache": "/scratch/sq", "local_cache_gb": 0, "local_cache_max_nodes": 0,
        "local_cache_copy_wait": 5, "prestart_srun_jobs": True, "metrics_dir": "/srv/textfile",
    }


@pytest.mark.parametrize(
    ("arg", "needle"),
    [
        ("bogus=1", "unknown argument 'bogus=1'"),
        ("use_squashfs=1", "unknown argument 'use_squashfs=1'"),
        ("local_cache_gb=-1", "local_cache_gb must be a whole number"),
        ("local_cache_gb=2G", "local_cache_gb must be a whole number"),
        ("local_cache=relative", "local_cache must be an absolute path"),
        ("local_cache_max_nodes=-1", "local_cache_max_nodes must be a whole number of nodes"),
        ("local_cache_max_nodes=16n", "local_cache_max_nodes must be a whole number of nodes"),
        ("local_cache_max_nodes=1000001", "from 0 (any number) to 1000000"),
        ("local_cache_copy_wait=0", "local_cache_copy_wait must be a whole number of seconds"),
        ("local_cache_copy_wait=10s", "local_cache_copy_wait must be a whole number of seconds"),
        ("local_cache_copy_wait=3601", "seconds from 1 to 3600"),
        ("runtime_path", "argument 'runtime_path' is not key=value"),
        ("runtime_path=", "empty value for runtime_path"),
        ("runtime_path=relative", "runtime_path must be an absolute path"),
        ("enroot=/usr/bin/en root", "enroot must be an absolute path without spaces"),
        ("image_cache=/a\nb", "holds a control character"),
        ("image_cache=/" + "x" * 5000, "is 5001 bytes long"),
        ("container_scope=node", "container_scope must be job or global"),
        ("execute_entrypoint=maybe", "execute_entrypoint must be a boolean"),
        ("execute_entrypoint=2", "execute_entrypoint must be a boolean"),
        ("use_squashfuse=maybe", "use_squashfuse must be a boolean"),
        ("importer=importer.sh", "importer must be an absolute path"),
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


# --- Pyxis 0.24's plugstack.conf lines load unchanged (issue 10, item 1) -------------------

PYXIS_TRUE = ["1", "true", "yes", "y", "TRUE", "Yes", "Y"]
PYXIS_FALSE = ["0", "false", "no", "n", "FALSE", "No", "N"]
PYXIS_BOOL_KEYS = ["execute_entrypoint", "sbatch_support", "use_squashfuse", "use_enroot_load",
                   "container_name_strict"]


@pytest.mark.parametrize("key", PYXIS_BOOL_KEYS)
@pytest.mark.parametrize("spelling", PYXIS_TRUE)
def test_pyxis_boolean_true_spellings(key, spelling):
    assert parse_plugstack_args([f"{key}={spelling}"])[key] is True


@pytest.mark.parametrize("key", PYXIS_BOOL_KEYS)
@pytest.mark.parametrize("spelling", PYXIS_FALSE)
def test_pyxis_boolean_false_spellings(key, spelling):
    assert parse_plugstack_args([f"{key}={spelling}"])[key] is False


def test_pyxis_site_line_loads_unchanged():
    # The line of a Pyxis 0.24 site, squall's .so put in place of Pyxis's.
    cfg = parse_plugstack_args(["runtime_path=/run/pyxis", "use_squashfuse=1",
                                "sbatch_support=true", "execute_entrypoint=no",
                                "container_scope=job", "use_enroot_load=n"])
    assert cfg["runtime_path"] == "/run/pyxis"
    assert cfg["use_squashfuse"] is True and cfg["sbatch_support"] is True
    assert cfg["execute_entrypoint"] is False and cfg["use_enroot_load"] is False
    assert cfg["container_scope"] == "job"


def test_pyxis_container_scope_defaults_to_global():
    assert parse_plugstack_args([])["container_scope"] == "global"


def test_unknown_key_names_itself_and_lists_pyxis_keys():
    with pytest.raises(SquallError) as exc:
        parse_plugstack_args(["use_squashfuse=1", "remap_root=1"])
    msg = str(exc.value)
    assert "unknown argument 'remap_root=1'" in msg, msg
    for key in ("use_squashfuse", "use_enroot_load", "importer", "container_scope"):
        assert key in msg, msg
    # ... and every key the plugin takes, the newest too (the list is the table's own).
    known = msg.split("(known: ", 1)[1].rstrip(")").split(", ")
    assert known == list(DEFAULTS), msg


def test_metrics_dir_none_turns_the_metrics_off():
    assert parse_plugstack_args(["metrics_dir=none"])["metrics_dir"] is None
    with pytest.raises(SquallError, match="metrics_dir must be an absolute path"):
        parse_plugstack_args(["metrics_dir=textfile"])
