"""The plugin runs sqshbuild with the job's cleaned environment (spank/core/env.c): what
sqshbuild reads to find credentials, mirrors and its network limits must survive it. The
node's /etc/containers/registries.conf is a file sqshbuild reads itself."""

import pytest

from squall.core import clean_environment, env_denied

READ_BY_SQSHBUILD = ["HOME", "PATH", "CONTAINERS_REGISTRIES_CONF", "ENROOT_CONFIG_PATH",
                     "XDG_CONFIG_HOME", "DOCKER_CONFIG", "NGC_API_KEY", "SQSHBUILD_TIMEOUT",
                     "SQSHBUILD_RETRIES", "SQSHBUILD_CREDENTIALS_TIMEOUT",
                     "SQSHBUILD_INSECURE_REGISTRIES", "https_proxy", "no_proxy"]


@pytest.mark.parametrize("name", READ_BY_SQSHBUILD)
def test_sqshbuild_settings_reach_it(name):
    assert not env_denied(name)
    assert clean_environment([f"{name}=/x", "LD_PRELOAD=/evil.so"]) == {name: "/x"}
