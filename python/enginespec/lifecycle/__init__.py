"""Running engines: recipes, the commands built from them, installing and probing, launch, stop,
adopt and supervise, and the log book of each run."""
