"""Datasets by spec, built in a trial process (and its workers): specs, the synthetic workload, image folders."""
