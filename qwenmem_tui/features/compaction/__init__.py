"""History compaction (issue 6): the token gauge, the block summariser, the decision
pins and the hook that folds old turns into a marker."""
