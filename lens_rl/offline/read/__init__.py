"""Reading one span file into what the rollups need: the one tree rule (:mod:`.tree`: each span's parent,
step, bucketed ancestor and place, cycles broken), and, after the re-cut of ``offline/``, the columns, the
reduction passes, intervals and the critical path's per-file walk."""
