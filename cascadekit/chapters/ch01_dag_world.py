"""Chapter 01: the DAG world (teaching cells only: the world is :mod:`cascadekit.world`)."""
