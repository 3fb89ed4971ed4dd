"""History compaction (issue 6): token gauge, block summariser, decision pins and the hook that folds old turns into a marker."""
