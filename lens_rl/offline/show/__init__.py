"""For people: the table, the report, Perfetto, status, watch, replay, the number formats."""
