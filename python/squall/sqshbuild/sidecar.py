"""What an image's sidecar (``image.json`` beside the ``.sqsh``) records: where the image
came from (:func:`of_registry`, :func:`of_local`), then how it was squashed and what its
config asks of the container (:func:`completed`)."""

from __future__ import annotations

import time
from typing import Any

from squall import __version__
from squall.sqshbuild.refs import Source
from squall.sqshbuild.registry import Manifest, RegistryClient
from squall.sqshbuild.sources import LocalImage
from squall.sqshbuild.squash import SquashOptions


def of_registry(src: Source, client: RegistryClient, manifest: Manifest,
                config: dict[str, Any], platform: str) -> dict[str, Any]:
    sidecar: dict[str, Any] = {
        "reference": src.text, "canonical": src.canonical, "manifest_digest": manifest.digest,
        "config_digest": manifest.config.digest,
        "layers": [d.digest for d in manifest.layers],
        "platform": manifest.platform or _platform_of(config, platform),
    }
    # Whose image this is (deputy.py): the registry asks for credentials at the manifest,
    # so by now the client knows whether it sent any.
    if client.credentialed:
        sidecar["pulled_with_credentials"] = {"registry": client.registry,
                                              "repository": client.repository}
    return sidecar


def of_local(src: Source, image: LocalImage, platform: str) -> dict[str, Any]:
    return {
        "reference": src.text, "canonical": src.canonical, "manifest_digest": image.key,
        "config_digest": image.config_digest, "layers": [n for n, _ in image.layers],
        "platform": image.platform or _platform_of(image.config, platform),
    }


def completed(sidecar: dict[str, Any], config: dict[str, Any], versions: dict[str, str],
              pipeline: str, squash: SquashOptions) -> dict[str, Any]:
    """``sidecar`` with the squash's time, tool versions and options, and the config's
    environment and entrypoint."""
    return dict(sidecar, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                versions=dict(sorted(versions.items())),
                squash={"pipeline": pipeline, "compressor": squash.compressor,
                        "level": squash.level, "block_size": squash.block_size,
                        "no_data_compression": squash.no_data_compression},
                sqshbuild_version=__version__,
                env=_env_of(config), entrypoint=_ep_of(config))


def _platform_of(config: dict[str, Any], default: str) -> str:
    arch = config.get("architecture")
    return f"{config.get('os', 'linux')}/{arch}" if arch else default


def _env_of(config: dict[str, Any]) -> list[str]:
    return list((config.get("config") or {}).get("Env") or [])


def _ep_of(config: dict[str, Any]) -> dict[str, Any]:
    inner = config.get("config") or {}
    return {"entrypoint": inner.get("Entrypoint"), "cmd": inner.get("Cmd"),
            "workdir": inner.get("WorkingDir") or "/"}
