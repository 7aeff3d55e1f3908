"""Example pipelines that run on GPUs (cuDF) and CPUs (pandas) from one command."""
