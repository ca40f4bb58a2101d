"""The offline tools: goodput, stragglers, Perfetto, the HTML report, replay and the parallel map. They read
the file store (:mod:`lens_rl.store`) and nothing of the recording side; the CLI is their face."""
