"""sqshbuild: OCI/Docker images to Enroot-compatible squashfs files, cached once per cluster."""
