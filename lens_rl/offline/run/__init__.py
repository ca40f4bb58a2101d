"""Every pass over the files: analyze, the parallel map, the refresh cache."""
