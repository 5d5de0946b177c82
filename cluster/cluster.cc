// cluster/: leases, singletons and the version registry (see README.md).
