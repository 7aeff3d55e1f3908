"""What runs in a worker process of the library's clusters: how GPU workers run tasks, the
steps of a worker's start, the fork server its process may come from, and its end.

Nothing here is imported by importing this package: each module is loaded where it is used
(a worker's preload, a local cluster's start).
"""
