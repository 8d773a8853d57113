"""The remote side of an output: one prefix of an object store (``output.remote``), claimed by one job.

``store`` is the only module that imports fsspec; ``prefix`` says what a job keeps under its prefix and who
owns it; ``upload`` copies sealed shards there while a run goes on; ``verify`` proves the prefix holds exactly
the local sealed shards.
"""
