"""Parts -> the report, pure (no files, no processes, no cache): goodput, rows, attempts, stragglers."""
