"""What every process shares: settings, trial configurations, results, events and the runner protocol."""
