"""EFA and NCCL: node detection (through the C core), NCCL log checks, node doctor."""
