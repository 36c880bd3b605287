"""`framework ship`: deliver a workspace's items through the one ingest endpoint."""
