"""loadertop's version: the package's (`loadertop.__version__`), and what a job's hello says it runs."""

VERSION = "0.1.0"
