"""loadertop's core: plain Python, no textual, rich or plotext. Its folders say where their code runs.

- `model/`: what every process shares: settings and trial configurations, results, events, the runner protocol.
- `engine/`: loadertop's own process: the driver, the search, the analysis, the report, the run folder, the API.
- `machine/`: loadertop's own process, reading the machine: probes (psutil, NVML), budgets and guards.
- `trial/`: the runner process, the trial it forks and that trial's DataLoader workers (imports torch).
- `datasets/`: loaded in a trial process and its workers: dataset specs, synthetic, image folders.

The faces (`loadertop.faces`: the CLI, headless, the TUI) use `loadertop.core.engine` and the model only;
`pyproject.toml`'s import-linter contracts enforce these rules in CI.
"""
