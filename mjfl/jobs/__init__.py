"""Jobs: model zoo, data sets, partitioning, ExecuTorch export and trainers."""
