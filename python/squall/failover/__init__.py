"""In-job failover on hot spares (docs/failover.md): a job allocated with spare nodes
watches its own nodes' heartbeats and, when one dies or the job hangs, relaunches its step
on a spare from the newest complete checkpoint, without waiting for Slurm to notice."""
