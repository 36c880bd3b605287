"""The reference ingest endpoint: the one door through which harvested data enters."""
