"""The study layer: an Optuna study over a search space, scored by trials; storage, baselines, warm starts,
confirmation, the model's ceiling and the "enough" rule, the config drawn from a finished study, fleets.
It never imports torch and never touches a GPU."""
