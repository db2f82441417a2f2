"""One sweep, driven: the Sweep (driver.py) runs the planned trials through one runner process (runner_link.py),
checks the dataset once (dataset_check.py), asks the runner for the ceilings (ceiling_requests.py), follows each
trial's messages (trial_watch.py) and stops on a data error every configuration shares (data_stop.py); the
settings are built once (settings.py) and `loadertop.sweep()` wraps it all (api.py). `loadertop stages` runs its
own child process and judges its measurement (stages_run.py).

The top layer of the engine, beside live/: it may use the search, the report, the verdict, the many-node parts and
the wording; nothing below imports it."""
