"""Frenzy's web dashboard: a live view of the cluster, the queue and each job's decisions."""
